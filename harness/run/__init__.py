"""A run and what it is made of: the sweep planned into jobs (`plan`), the run directory with
its plan, job records and layout (`rundir`), the processes bench starts and must end (`procs`)
and the work it splits over forked workers (`forked`), what the jobs can cost (`cost`) and which
bench made them (`provenance`)."""
