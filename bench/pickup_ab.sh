#!/usr/bin/env bash
# The pickup of two commits, each measured by its own tree's bench/run.py, alternated (issue 44's
# bisection of the pickup tail):
#
#   bash bench/pickup_ab.sh 52be52e 5048153 3     # three rounds, the order swapped every round
#   bash bench/pickup_ab.sh 52be52e d99ba05 4b94707 3   # more commits: the order rotated every round
#
# Each run checks the commit out in a git worktree (/tmp/awa-pickup-ab), sets its bench's pickup
# samples to $SAMPLES (600; a p99 of 200 is its two slowest), adds django.contrib.postgres to its
# bench project where that tree lacks it (check awa.E016 refused to start the worker before
# e8a8c63), and runs `bench/run.py --systems awa_django --metrics latency --reps 1` on Debian's
# cluster (bench/run.py's default). Prints one line per run: commit, pickup p50 / p95 / p99 in ms.
# One run's p99 moves by half a millisecond on the same code: compare commits by rounds, not runs.
set -euo pipefail
if [ $# -lt 3 ]; then echo "usage: $0 COMMIT COMMIT [COMMIT...] ROUNDS" >&2; exit 2; fi
rounds=${*: -1}
commits=("${@:1:$#-1}")
SAMPLES=${SAMPLES:-600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
tree=${TMPDIR:-/tmp}/awa-pickup-ab
logs=$(mktemp -d)

run() {
  local commit=$1
  git -C "$ROOT" worktree remove --force "$tree" >/dev/null 2>&1 || true
  git -C "$ROOT" worktree add -f "$tree" "$commit" >/dev/null 2>&1
  sed -i "s/\"latency_samples\": 200,/\"latency_samples\": $SAMPLES,/" "$tree/bench/run.py"
  grep -q "django.contrib.postgres" "$tree/bench/djproject/settings_awa.py" ||
    sed -i 's/    "django.contrib.auth",/    "django.contrib.auth",\n    "django.contrib.postgres",/' \
      "$tree/bench/djproject/settings_awa.py"
  (cd "$tree" && "$PYTHON" bench/run.py --systems awa_django --metrics latency --reps 1) \
    >"$logs/$commit.out" 2>"$logs/$commit.err" || { echo "$commit: bench/run.py failed, see $logs/$commit.err"; return 1; }
  echo "$commit $(grep -i 'pickup latency p\(50\|95\|99\)' "$logs/$commit.out" | awk -F'|' '{printf "%s ", $3}')"
}

n=${#commits[@]}
for round in $(seq 1 "$rounds"); do
  # Two commits: swapped every round. More: rotated by one every round, so each runs in every place.
  for i in $(seq 0 $((n - 1))); do
    if [ "$n" = 2 ] && [ $((round % 2)) = 0 ]; then j=$((1 - i)); else j=$(((i + round - 1) % n)); fi
    run "${commits[$j]}"
  done
done
git -C "$ROOT" worktree remove --force "$tree" >/dev/null 2>&1 || true
