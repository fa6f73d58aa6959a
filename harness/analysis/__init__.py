"""Judging runs: two runs or a run and its history compared key by key with their statistics
(`sides`, `stats`, `compare`), what a gate asks beyond that (`gating`, `gate`), the history
database, its baselines and its change points (`store`, `history`, `baseline`, `series`,
`changes`, `transfer`, `nodehistory`, `overview`), and a run against its profile's reference
figures (`profile_reference`); see docs/concepts/architecture.md."""
