"""What the tests share, by what it serves: running bench and reading what it leaves
(process.py), real runs and copies of them (runs.py), Slurm faked or real (slurm.py), and the
services a test starts (services.py). tests/conftest.py registers their fixtures and hands their
helpers on, so that a test imports any of them from `conftest`."""
