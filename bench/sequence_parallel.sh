#!/usr/bin/env bash
# Sequence parallelism against plain tensor parallelism: `phalanx train --model gpt` on 2 ranks
# with `--tp 2`, and with `--tp 2 --sequence-parallel`, in interleaved rounds. Per run: the
# largest rank's peak resident memory (`/usr/bin/time -f %M`, start-up included) and the
# tokens/s of the done line; the script prints the medians over the rounds and the ratios.
# Dropout is on (0.1, the default): its masks and the norms' activations are what sequence
# parallelism splits.
#
#   [HIDDEN=512] [DEPTH=4] [HEADS=8] [SEQ=512] [BATCH=8] [STEPS=4] [ROUNDS=3] \
#     bash bench/sequence_parallel.sh
#
# Needs: cargo build --release -p phalanx-cli, and /usr/bin/time (Debian's `time` package).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
phalanx="$here/target/release/phalanx"
HIDDEN=${HIDDEN:-512} DEPTH=${DEPTH:-4} HEADS=${HEADS:-8} SEQ=${SEQ:-512}
BATCH=${BATCH:-8} STEPS=${STEPS:-4} ROUNDS=${ROUNDS:-3}
[ -x "$phalanx" ] || { echo "build first: cargo build --release -p phalanx-cli" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/worker" <<SH
#!/bin/sh
exec /usr/bin/time -f "peak_kb %M" "$phalanx" train --model gpt --hidden $HIDDEN --depth $DEPTH \
  --heads $HEADS --seq-len $SEQ --batch-size $BATCH --max-steps $STEPS "\$@"
SH
chmod +x "$work/worker"
run() { # label flags... -> appends "peak_kb tokens_per_s" to $work/<label>
  local label=$1; shift
  local out
  out=$("$phalanx" launch --standalone --nproc-per-node 2 -- "$work/worker" --tp 2 "$@" 2>&1)
  local peak tps
  peak=$(grep -o 'peak_kb [0-9]*' <<<"$out" | awk '{print $2}' | sort -n | tail -1)
  tps=$(grep -o '[0-9.]* tokens/s' <<<"$out" | head -1 | awk '{print $1}')
  [ -n "$peak" ] && [ -n "$tps" ] || { echo "$label failed:" >&2; echo "$out" >&2; exit 1; }
  echo "$peak $tps" >>"$work/$label"
}
for _ in $(seq "$ROUNDS"); do
  run tp
  run sp --sequence-parallel
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tp_peak=$(awk '{print $1}' "$work/tp" | median); tp_tps=$(awk '{print $2}' "$work/tp" | median)
sp_peak=$(awk '{print $1}' "$work/sp" | median); sp_tps=$(awk '{print $2}' "$work/sp" | median)
echo "GPT d $HIDDEN x $DEPTH, $HEADS heads, $SEQ tokens, batch $BATCH, $STEPS steps, 2 ranks, medians of $ROUNDS rounds"
printf '%-30s %14s %12s\n' run "peak MB/rank" "tokens/s"
printf '%-30s %14d %12s\n' "--tp 2" $((tp_peak / 1024)) "$tp_tps"
printf '%-30s %14d %12s\n' "--tp 2 --sequence-parallel" $((sp_peak / 1024)) "$sp_tps"
printf 'ratio (sequence-parallel / not): memory %.2f, tokens/s %.2f\n' \
  "$(echo "$sp_peak / $tp_peak" | bc -l)" "$(echo "$sp_tps / $tp_tps" | bc -l)"
