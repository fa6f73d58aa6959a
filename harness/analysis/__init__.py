"""Analysis: summaries in, judgements out. Statistics, run-to-run comparison, stragglers,
change points, and the history database (docs/concepts/architecture.md)."""
