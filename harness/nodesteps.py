"""A path job scripts name: the node check's driver
(`python -m harness.nodesteps FOLDER`), which lives in harness/nodes/allocation.py.

The job scripts bench writes name this path, and so do those of every older run directory,
which a newer bench resumes by running them as they are: so it stays, and runs the module as
`python -m` would (docs/concepts/architecture.md, "Paths job scripts name")."""

import runpy

if __name__ == "__main__":
    runpy.run_module("harness.nodes.allocation", run_name="__main__", alter_sys=True)
