#!/usr/bin/env bash
# `phalanx train --model cnn|transformer` next to PyTorch DDP (torchrun + Gloo, the reference
# in shared/anchors/ddp/torch_models.py) on local ranks (2 by default), interleaved in one run: test accuracy
# and training samples/s (PyTorch's excludes its first epoch; phalanx's is over all epochs of
# training steps, so its own warm-up counts against it). Prints every run and the medians.
# Usage: [MODELS=cnn,transformer] [ROUNDS=3] [NPROC=2] [THREADS=1] bench/compare_models.sh
# NPROC ranks, each computing on THREADS threads (phalanx: RAYON_NUM_THREADS; PyTorch:
# torch.set_num_threads through the reference's --threads). NPROC=1 THREADS=2 is the 1-rank,
# 2-thread comparison.
# Needs: ../shared/anchors/setup.sh run once (PyTorch in $ANCHORS_VENV).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
anchors=${ANCHORS:-$here/../shared/anchors}
VENV=${ANCHORS_VENV:-$HOME/.cache/phalanx-anchors}
MODELS=${MODELS:-cnn,transformer}
ROUNDS=${ROUNDS:-3}
NPROC=${NPROC:-2}
THREADS=${THREADS:-1}
out=${OUT:-$(mktemp -d /tmp/phalanx-models.XXXX)}
mkdir -p "$out"
cargo build --release -q -p phalanx-cli --manifest-path "$here/Cargo.toml"
bin=$here/target/release/phalanx
epochs() { [ "$1" = cnn ] && echo 5 || echo 10; }
for model in ${MODELS//,/ }; do
  e=$(epochs "$model")
  for r in $(seq 1 "$ROUNDS"); do
    RAYON_NUM_THREADS=$THREADS "$bin" train --standalone --nproc-per-node "$NPROC" --model "$model" --dataset mnist5k --epochs "$e" \
      --batch-size 32 --optimizer adam --lr 0.001 --json 2>/dev/null | sed 's/^\[rank [0-9]*\]: //' \
      | grep '"event":"summary"' | head -1 > "$out/phalanx-$model-$r.json"
    timeout 900 "$VENV/bin/torchrun" --standalone --nproc_per_node="$NPROC" \
      "$anchors/ddp/torch_models.py" --model "$model" --epochs "$e" --batch 32 \
      --threads "$THREADS" 2>/dev/null \
      | grep '"event": "summary"' > "$out/torch-$model-$r.json" \
      || echo "torch $model round $r: torchrun or its summary failed (a summary printed is kept)" >&2
  done
done
python3 - "$out" "$MODELS" "$ROUNDS" "$NPROC" "$THREADS" <<'PY'
import json, sys, statistics as st
out, models, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
print(f"{sys.argv[4]} rank(s), {sys.argv[5]} thread(s) each")
print(f"{'model':12} {'system':10} {'accuracy':>9} {'samples/s':>10}   runs (accuracy, samples/s)")
for m in models:
    rows = {}
    for sys_ in ("phalanx", "torch"):
        runs = []
        for r in range(1, rounds + 1):
            try:
                o = json.load(open(f"{out}/{sys_}-{m}-{r}.json"))
                runs.append((o["test_accuracy"], o["samples_per_s"]))
            except Exception:
                pass
        if not runs:
            continue
        acc, sps = st.median(a for a, _ in runs), st.median(s for _, s in runs)
        rows[sys_] = sps
        shown = ", ".join(f"({a:.4f}, {s:.0f})" for a, s in runs)
        print(f"{m:12} {sys_:10} {100*acc:8.2f}% {sps:10.0f}   {shown}")
    if len(rows) == 2:
        print(f"{m:12} phalanx/torch samples/s: {rows['phalanx']/rows['torch']:.2f}x")
PY
echo "raw results: $out"
