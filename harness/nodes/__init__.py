"""The node and link check (`bench nodes`, docs/guides/nodes.md) but for its command flow
(harness/check_nodes.py): the rounds and their steps, pure (`rounds`); running them and reading
back what they measured (`driver`); and the verdict, which names the nodes and links to drain
(`verdict`)."""
