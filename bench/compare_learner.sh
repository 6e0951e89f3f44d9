#!/usr/bin/env bash
# burn-train's Learner through phalanx_learner::Distributed against phalanx's own training loop
# and against Burn's own single-device Learner, on the same model (`--model cnn`: the layers of
# `phalanx train --model cnn`), release builds, same run, interleaved (A B C D, A B C D, ...):
#   A  mnist_learner on 2 ranks (phalanx launch): training samples/s, rank 0's training passes
#   B  phalanx train --model cnn on 2 ranks, the same global batch: its summary's samples_per_s
#   C  mnist_learner alone (1 process, Distributed): wall time of the whole program
#   D  mnist_burn alone (1 process, Burn's single-device strategy): the same program's wall time
# Prints every run, the medians and the ratios A/B and D/C (>= 0.95 and ~1.0 are the claims).
#
# Usage: bash bench/compare_learner.sh [ROUNDS=3] [EPOCHS=3]   (NO_BUILD=1: use the binaries as built)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} EPOCHS=${2:-3}
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p phalanx-cli -p phalanx-learner --examples
PHX=target/release/phalanx
EX=target/release/examples
tmp=$(mktemp -d /tmp/phalanx-learner-bench.XXXX)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
for r in $(seq "$ROUNDS"); do
  # A: 4,000 images per epoch over the sum of rank 0's training-pass times.
  rm -rf "$tmp/a"
  "$PHX" launch --standalone --nproc-per-node 2 -- "$EX/mnist_learner" --model cnn \
    --batch-size 64 --epochs "$EPOCHS" --artifact-dir "$tmp/a" 2>/dev/null \
    | grep -o 'train [0-9]* samples/s' | awk '{t += 4000 / $2; n += 4000}
        END {printf "A %.0f\n", n / t}' >> "$tmp/runs"
  # B: 32 per rank, 2 ranks: the same global batch of 64.
  "$PHX" train --standalone --nproc-per-node 2 --model cnn --dataset mnist5k --epochs "$EPOCHS" \
    --batch-size 32 --optimizer adam --lr 0.001 --json 2>/dev/null \
    | sed 's/^\[rank [0-9]*\]: //' | grep '"event":"summary"' | head -1 \
    | python3 -c 'import json,sys; print("B %.0f" % json.load(sys.stdin)["samples_per_s"])' \
    >> "$tmp/runs"
  for x in C:mnist_learner D:mnist_burn; do
    rm -rf "$tmp/s"
    t0=$(now)
    "$EX/${x#*:}" --model cnn --epochs "$EPOCHS" --artifact-dir "$tmp/s" > /dev/null 2>&1
    echo "${x%%:*} $(echo "$(now) - $t0" | bc)" >> "$tmp/runs"
  done
done
python3 - "$tmp/runs" <<'PY'
import sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    runs.setdefault(k, []).append(float(v))
m = {k: st.median(v) for k, v in runs.items()}
names = {"A": "mnist_learner, 2 ranks (samples/s)", "B": "phalanx train --model cnn, 2 ranks (samples/s)",
         "C": "mnist_learner, 1 process (s)", "D": "mnist_burn, 1 process (s)"}
for k in "ABCD":
    if k in runs:
        print(f"{names[k]:48} median {m[k]:9.2f}   runs {', '.join(f'{v:.2f}' for v in runs[k])}")
if "A" in m and "B" in m:
    print(f"A / B (the strategy against phalanx's own loop): {m['A'] / m['B']:.3f}")
if "C" in m and "D" in m:
    print(f"D / C (Burn's own strategy's time over Distributed's): {m['D'] / m['C']:.3f}")
PY
