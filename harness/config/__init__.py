"""What a user writes and bench checks before anything runs: the YAML loader and its checks
(`fields`), the sweep's schema (`spec`) and the sweep file read with its command-line overrides
(`sweepfile`), a cluster's profile (`cluster_profile`) and the link peaks its hardware allows
(`peak`), and Slurm's hostlists (`hostlists`). Nothing here starts a process or writes a file."""
