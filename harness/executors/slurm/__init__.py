"""The Slurm executor: a cluster profile, the sbatch script rendered from it, and the
executor that submits and tracks the jobs (docs/concepts/architecture.md)."""
