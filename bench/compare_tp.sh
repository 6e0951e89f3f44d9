#!/usr/bin/env bash
# Tensor or pipeline parallelism on 2 ranks, next to PyTorch's over Gloo on the same model:
# MODE=tp (default): `phalanx train --model gpt --tp 2` against `parallelize_module`
# (ColwiseParallel/RowwiseParallel, Megatron's layout); MODE=pp: `--pp 2 --microbatches 4
# --pp-schedule 1f1b` against `torch.distributed.pipelining`'s `Schedule1F1B` (2 stages of one
# block each, 4 microbatches). The shape: a GPT of 2 blocks, d HIDDEN (64), 4 heads, SEQ (32) tokens, byte vocabulary
# (256), batch BATCH (8), SGD lr 0.1, no dropout, STEPS steps (python/tests/test_tp_pp.py is
# PyTorch's side). Rounds interleaved, medians of tokens/s (tokens: steps × batch × SEQ). Each
# rank computes on one
# thread (RAYON_NUM_THREADS=1; torch under phalanx launch gets OMP_NUM_THREADS=1).
# phalanx's figure is its summary's samples/s (the training steps, data included; startup
# excluded), PyTorch's the timed loop of its steps.
# Each round also trains the whole model in one process, on each side (`--nproc-per-node 1`;
# test_tp_pp.py --only whole): the compute that tp and pp divide. The last lines say each
# side's speed-up over its own one process, which separates the parallelism from the
# per-core compute (Burn's CPU kernels against PyTorch's).
#
#   [MODE=tp|pp] [ROUNDS=5] [STEPS=100] [HIDDEN=64] [SEQ=32] [BATCH=8] bash bench/compare_tp.sh
#
# Needs: ../shared/anchors/setup.sh run once, and phalanx_torch installed in that venv
# (pip install ./python), for PyTorch's side.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
VENV=${ANCHORS_VENV:-$HOME/.cache/phalanx-anchors}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-100}
HIDDEN=${HIDDEN:-64}
SEQ=${SEQ:-32}
BATCH=${BATCH:-8}
MODE=${MODE:-tp}
case "$MODE" in
  tp) flags=(--tp 2) torch_run="tp" label="--tp 2" peer="parallelize_module" ;;
  pp) flags=(--pp 2 --microbatches 4 --pp-schedule 1f1b) torch_run="pp 1f1b"
      label="--pp 2 1f1b" peer="Schedule1F1B" ;;
  *) echo "MODE=$MODE: expected tp or pp" >&2; exit 2 ;;
esac
cargo build --release -q -p phalanx-cli --manifest-path "$here/Cargo.toml"
bin=$here/target/release/phalanx
cd "$here"
# phalanx's tokens/s on NPROC ranks with the extra flags given: its summary's samples/s × SEQ.
phalanx_tokens() {
  local nproc=$1 s
  shift
  s=$(RAYON_NUM_THREADS=1 "$bin" train --standalone --nproc-per-node "$nproc" "$@" --model gpt \
        --hidden "$HIDDEN" --depth 2 --heads 4 --seq-len "$SEQ" --batch-size "$BATCH" --optimizer sgd --lr 0.1 \
        --dropout 0 --max-steps "$STEPS" --json 2>/dev/null | sed 's/^\[rank [0-9]*\]: //' \
      | grep '"event":"summary"' | head -1)
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])["samples_per_s"] * int(sys.argv[2]))' "$s" "$SEQ"
}
# PyTorch's tokens/s for test_tp_pp.py's run RUN on NPROC ranks over Gloo. One thread each: a
# launcher gives OMP_NUM_THREADS=1 only to several processes, so it is set here for one too.
torch_tokens() {
  local nproc=$1 run=$2
  OMP_NUM_THREADS=1 PHALANX_PYTHON=$VENV/bin/python PHALANX_TIMEOUT=60s "$bin" launch --standalone \
        --nproc-per-node "$nproc" python/tests/test_tp_pp.py --only "$run" --backends gloo \
        --steps "$STEPS" --hidden "$HIDDEN" --seq-len "$SEQ" --batch "$BATCH" 2>/dev/null | grep -o "time $run gloo [0-9.]* s ([0-9]* tokens/s)" \
      | head -1 | grep -o '([0-9]*' | tr -d '('
}
phalanx_tps=() torch_tps=() phalanx_one=() torch_one=()
for r in $(seq 1 "$ROUNDS"); do
  p=$(phalanx_tokens 2 "${flags[@]}")
  t=$(torch_tokens 2 "$torch_run")
  p1=$(phalanx_tokens 1)
  t1=$(torch_tokens 1 whole)
  echo "round $r: phalanx $label $(printf %.0f "$p") tokens/s, PyTorch $peer over gloo $t tokens/s;" \
    "one process: phalanx $(printf %.0f "$p1"), PyTorch $t1"
  phalanx_tps+=("$p") torch_tps+=("$t") phalanx_one+=("$p1") torch_one+=("$t1")
done
python3 - "${phalanx_tps[*]}" "${torch_tps[*]}" "$label" "${phalanx_one[*]}" "${torch_one[*]}" <<'PY'
import statistics as st, sys
med = lambda i: st.median(map(float, sys.argv[i].split()))
p, t, p1, t1 = med(1), med(2), med(4), med(5)
print(f"median of {len(sys.argv[1].split())} rounds: phalanx {sys.argv[3]} {p:.0f} tokens/s, PyTorch over gloo {t:.0f} tokens/s: {p / t:.2f}x")
print(f"one process, the whole model: phalanx {p1:.0f} tokens/s, PyTorch {t1:.0f}: {p1 / t1:.2f}x (per-core compute)")
print(f"speed-up over its own one process: phalanx {p / p1:.2f}x, PyTorch {t / t1:.2f}x (the parallelism)")
PY
