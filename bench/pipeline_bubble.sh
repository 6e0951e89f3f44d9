#!/usr/bin/env bash
# The pipeline's bubble against its schedule's theory, at m = 4p: `phalanx train --model gpt
# --pp 2 --microbatches 8` under each schedule (interleaved with 2 virtual stages over 4
# blocks), dropout off, STEPS steps, ROUNDS rounds interleaved. Prints, per run, the summary's
# `pipeline_bubble` (the busiest stage's idle share in its median step), the theory
# `(p − 1)/(v·m + p − 1)`, `pipeline_imbalance`, each rank's `pipeline_idle` over the whole run,
# and samples/s; then the medians. BASELINE=path/to/another/phalanx interleaves a second build
# (an older commit's) on the same runs: its samples/s and its bubble, which before 2026-12
# was each rank's own idle share over the run (printed as its idle per rank, and its "bubble"
# is then rank 0's). TP=2 runs each stage as a tensor-parallel pair (`--tp 2`, 4 ranks), whose
# stages compute with the all-reduces of another group.
#
#   [ROUNDS=3] [STEPS=100] [BATCH=8] [SCHEDULES="1f1b gpipe interleaved"] [TP=1] [BASELINE=…] \
#     bash bench/pipeline_bubble.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-100}
BATCH=${BATCH:-8}
SCHEDULES=${SCHEDULES:-1f1b gpipe interleaved}
TP=${TP:-1}
cargo build --release -q -p phalanx-cli --manifest-path "$here/Cargo.toml"
bins=("$here/target/release/phalanx")
[ -n "${BASELINE:-}" ] && bins+=("$BASELINE")
out=$(mktemp)
log=$(mktemp)
trap 'rm -f "$out" "$log"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for schedule in $SCHEDULES; do
    extra=(--depth 2)
    [ "$schedule" = interleaved ] && extra=(--virtual-stages 2 --depth 4)
    for bin in "${bins[@]}"; do
      if ! "$bin" train --standalone --nproc-per-node $((2 * TP)) --tp "$TP" --model gpt --pp 2 --microbatches 8 \
        --pp-schedule "$schedule" "${extra[@]}" --dropout 0 --batch-size "$BATCH" \
        --max-steps "$STEPS" --json >"$log" 2>&1; then
        echo "$bin train --pp-schedule $schedule failed:" >&2
        tail -20 "$log" >&2
        exit 1
      fi
      sed 's/^\[rank [0-9]*\]: //' "$log" | grep '"event":"summary"' \
        | sed "s|^|$schedule $bin |" >>"$out"
    done
  done
done
python3 - "$out" "${bins[0]}" "$((2 * TP))" <<'PY'
import collections, json, statistics as st, sys
runs = collections.defaultdict(list)
lines = [l.split(" ", 2) for l in open(sys.argv[1])]
for schedule, bin, summary in lines:
    runs[(schedule, bin)].append(json.loads(summary))
for (schedule, bin), ranks in runs.items():
    which = "this build" if bin == sys.argv[2] else bin
    world = int(sys.argv[3])
    by_run = [ranks[i:i + world] for i in range(0, len(ranks), world)]
    print(f"{schedule} ({which}):")
    for run in by_run:
        r0 = next(r for r in run if r["rank"] == 0)
        idle = " ".join(f"{r.get('pipeline_idle', r.get('pipeline_bubble')):.3f}"
                        for r in sorted(run, key=lambda r: r["rank"]))
        bubble = r0.get("pipeline_bubble")
        print(f"  bubble {bubble:.3f} (theory {r0['pipeline_bubble_theory']:.3f}), imbalance "
              f"{r0.get('pipeline_imbalance', float('nan')):.3f}, idle per rank {idle}, "
              f"{r0['samples_per_s']:.0f} samples/s")
    med = lambda k: st.median(next(r for r in run if r["rank"] == 0).get(k, float("nan")) for run in by_run)
    print(f"  median: bubble {med('pipeline_bubble'):.3f}, {med('samples_per_s'):.0f} samples/s")
PY
