"""The `bench` subcommands, a module per group: each command beside its parser (harness/cli.py
assembles them)."""
