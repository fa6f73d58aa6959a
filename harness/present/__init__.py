"""Presentation: judgements in, text and files out. Terminal, markdown and CSV tables, the
HTML report, plots, and the files CI systems read (docs/concepts/architecture.md)."""
