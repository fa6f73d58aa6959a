"""The harness: sweep spec, matrix expansion, executors, collection, plots and the bench CLI."""
