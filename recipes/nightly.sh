#!/bin/bash
# bench's nightly regression gate (docs/guides/nightly.md): sweep, judge the run
# against the cluster's history, then add it to the history. The exit status is the verdict:
# 0 nothing regressed, 1 a key regressed or failed, 3 some key could not be judged, 2 bad input.
# The first run of a cluster has no baseline: run with BENCH_FIRST_NIGHT=1, it is added (an
# SQLite history created if need be) and passes, and the nights after it are judged. Without it,
# a history or cluster with no run stops the night before the sweep, with exit 2: a mistyped NAME
# or BENCH_HISTORY never starts a history of its own. Until the history holds 5 runs of a key, a
# key fails only beyond the provisional margin of 40% (docs/concepts/noise.md); from then on, outside the
# band its last 5 runs draw. A night that failed is kept with its verdict and never joins a
# baseline, so a regression fails every night until it is fixed or `bench history accept ID
# --reason TEXT` makes it the new normal. The verdicts for the CI to publish are in
# <run>/regress/junit.xml, copied to $JUNIT when it is set.
#
#   BENCH_CLUSTER=/shared/bench/site.yaml BENCH_RESULTS=/shared/bench/results \
#   BENCH_HISTORY=/shared/bench/history.sqlite NAME=site BENCH_FIRST_NIGHT=1 recipes/nightly.sh   # once
#   BENCH_CLUSTER=/shared/bench/site.yaml BENCH_RESULTS=/shared/bench/results \
#   BENCH_HISTORY=/shared/bench/history.sqlite NAME=site recipes/nightly.sh                       # nightly
#
# Several clusters share one history in PostgreSQL (docs/guides/fleet.md): BENCH_HISTORY is then a
# postgresql:// URL without its password, which libpq reads from PGPASSWORD or ~/.pgpass.
set -uo pipefail
: "${BENCH_RESULTS:?where runs go: a directory on the filesystem the compute nodes share}"
: "${BENCH_HISTORY:?the history database, kept from one night to the next}"
: "${NAME:?the name of the cluster in the history}"
SWEEP=${SWEEP:-}  # none: bench's own, shipped with it (sweeps/default.yaml on Slurm, local.yaml locally)
MAX_NODES=${MAX_NODES:-}  # none: the sweep's own (8 in sweeps/default.yaml, 2 emulated in local.yaml)
EXECUTOR=${EXECUTOR:-auto}  # auto: Slurm with BENCH_CLUSTER, the profile, where sbatch is on PATH
read -ra regress_args <<< "${REGRESS_ARGS:-}"  # e.g. --threshold 10%
FIRST=${BENCH_FIRST_NIGHT:-0}  # 1: the cluster's first night, which seeds its history
case $FIRST in 0|1) ;; *) echo "nightly: BENCH_FIRST_NIGHT is '$FIRST'; set it to 1 for a cluster's first night, or unset it" >&2; exit 2;; esac
run="$BENCH_RESULTS/nightly-$(date +%Y%m%d-%H%M%S)"

if [ "$FIRST" = 0 ]; then
  # How many runs of this cluster the history holds, before the sweep: a history that does not
  # exist or cannot be read, or a cluster it does not know, stops the night with bench's own line.
  runs=$(bench history list --cluster "$NAME" --count) || exit $?
  case $runs in ''|*[!0-9]*) echo "nightly: bench history list --count printed '$runs', not a number" >&2; exit 70;; esac
  if [ "$runs" -eq 0 ]; then
    echo "nightly: the history knows cluster $NAME but holds no run of it; seed its first night with BENCH_FIRST_NIGHT=1" >&2
    exit 2
  fi
fi

bench sweep ${SWEEP:+"$SWEEP"} ${MAX_NODES:+--max-nodes "$MAX_NODES"} --executor "$EXECUTOR" --yes --out "$run"
swept=$?
# 1 means some job did not complete: regress reports its keys as failed. Anything else stops here.
if [ "$swept" -ne 0 ] && [ "$swept" -ne 1 ]; then
  echo "nightly: bench sweep ended with status $swept; nothing judged" >&2
  exit "$swept"
fi
judged=()
if [ "$FIRST" = 0 ]; then
  bench regress "$run" --cluster "$NAME" --out "$run/regress" "${regress_args[@]}"
  verdict=$?
  # 0 passed, 1 regressed, 3 could not judge: added with its verdict (a night that failed never
  # becomes a baseline). Anything else, bad input included, stays out of the history.
  if [ "$verdict" -ne 0 ] && [ "$verdict" -ne 1 ] && [ "$verdict" -ne 3 ]; then exit "$verdict"; fi
  if [ -n "${JUNIT:-}" ]; then cp "$run/regress/junit.xml" "$JUNIT" || exit $?; fi
  judged=(--verdict "$run/regress/gate.json")
else
  echo "nightly: the first run of $NAME in the history becomes its baseline; nothing to judge yet"
  verdict=0
  judged=(--create --new-cluster)  # refused where the cluster has runs already: the flag was left set
fi
bench history add "$run" --cluster "$NAME" --label nightly "${judged[@]}" || exit $?
exit "$verdict"
