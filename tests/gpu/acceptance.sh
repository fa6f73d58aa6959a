#!/usr/bin/env bash
# bench's first run on a GPU, one command: every CUDA path, a PASS/FAIL table, exit 1 on any
# failure, exit 2 without a GPU (docs/guides/gpu-acceptance.md). Options: tests/gpu/acceptance.py.
#
#   tests/gpu/acceptance.sh                 # after the Quickstart's first command
#   tests/gpu/acceptance.sh --dry-run       # what it would run, on any machine
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${BENCH_PYTHON:-$here/../../.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" "$here/acceptance.py" "$@"
