#!/usr/bin/env bash
# PyTorch's own tensor parallelism (parallelize_module, ColwiseParallel/RowwiseParallel) and
# pipelining (PipelineStage, ScheduleGPipe, Schedule1F1B) over backend "phalanx" against gloo,
# in the same 2 processes, interleaved rounds, medians (python/tests/test_tp_pp.py: a GPT-style
# decoder of 2 blocks, d 64, 4 heads, 32 tokens, batch 8, 30 SGD steps per run; the losses and
# parameters of the first round must be bitwise equal to gloo's).
#
#   bash bench/torch_tp_pp.sh [ROUNDS]      # default 5
#
# Needs a Python with torch and phalanx_torch (PHALANX_PYTHON, default the anchors' venv) and a
# built phalanx (PHALANX, default target/release/phalanx, else target/debug/phalanx).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
py=${PHALANX_PYTHON:-$HOME/.cache/phalanx-anchors/bin/python}
phalanx=${PHALANX:-target/release/phalanx}
[ -x "$phalanx" ] || phalanx=target/debug/phalanx
[ -x "$phalanx" ] || { echo "build phalanx first (cargo build --release -p phalanx-cli)" >&2; exit 1; }
PHALANX_PYTHON=$py PHALANX_TIMEOUT=60s "$phalanx" launch --standalone --nproc-per-node 2 \
  python/tests/test_tp_pp.py --rounds "$rounds" | grep -E 'time |ok$|bitwise'
