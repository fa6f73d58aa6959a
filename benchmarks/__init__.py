"""Workloads run on every rank inside a job. Nothing here imports the harness."""
