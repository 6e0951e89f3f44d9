#!/usr/bin/env bash
# Peak memory per rank of a model cut across ranks: `phalanx train --model gpt --hidden 1024
# --depth 8` (about 101 M parameters) with Adam, 2 steps, on 1 rank and on 4 ranks with
# `--pp 4`, `--tp 4`, `--tp 2 --pp 2` and `--sharding full`. Each rank runs under
# `/usr/bin/time -f %M` (peak resident set, start-up included); the script prints each run's
# largest rank and its ratio to the 1-rank run. The target in the model-parallelism issue is at
# most 0.45× for each model-parallel run.
#
#   [HIDDEN=1024] [DEPTH=8] bash bench/memory_model_parallel.sh
#
# Needs: cargo build --release -p phalanx-cli, and /usr/bin/time (Debian's `time` package).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
phalanx="$here/target/release/phalanx"
HIDDEN=${HIDDEN:-1024}
DEPTH=${DEPTH:-8}
[ -x "$phalanx" ] || { echo "build first: cargo build --release -p phalanx-cli" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
worker=$(mktemp)
trap 'rm -f "$worker"' EXIT
cat >"$worker" <<SH
#!/bin/sh
exec /usr/bin/time -f "peak_kb %M" "$phalanx" train --model gpt --hidden $HIDDEN --depth $DEPTH \
  --heads 8 --seq-len 64 --batch-size 4 --max-steps 2 --optimizer adam "\$@"
SH
chmod +x "$worker"
peak() { # nproc flags... -> the largest rank's peak in KB
  local n=$1; shift
  "$phalanx" launch --standalone --nproc-per-node "$n" -- "$worker" "$@" 2>&1 \
    | grep -o 'peak_kb [0-9]*' | awk '{print $2}' | sort -n | tail -1
}
one=$(peak 1)
printf '%-28s %12s %8s\n' run "peak MB/rank" ratio
printf '%-28s %12d %8s\n' "1 rank" $((one / 1024)) 1.00
for flags in "--pp 4" "--tp 4" "--tp 2 --pp 2" "--sharding full"; do
  # shellcheck disable=SC2086
  p=$(peak 4 $flags)
  printf '%-28s %12d %8.2f\n' "4 ranks $flags" $((p / 1024)) "$(echo "$p / $one" | bc -l)"
done
