#!/usr/bin/env bash
# Allreduce bus bandwidth of phalanx next to Gloo (PyTorch) and, when installed, Open MPI,
# measured in the same run on this machine. Medians of --iters timed iterations per size.
# Usage: bench/compare_allreduce.sh [WORLDS=2,4] [SIZES=4K,64K,1M,16M,64M,256M]
# Needs: ../shared/anchors/setup.sh run once (PyTorch in $ANCHORS_VENV).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
anchors=${ANCHORS:-$here/../shared/anchors}
PY=${PY:-${ANCHORS_VENV:-$HOME/.cache/phalanx-anchors}/bin/python}
WORLDS=${WORLDS:-2,4}
SIZES=${SIZES:-4K,64K,1M,16M,64M,256M}
ITERS=${ITERS:-20}
out=${OUT:-$(mktemp -d /tmp/phalanx-compare.XXXX)}
mkdir -p "$out"
cargo build --release -q -p phalanx-cli --manifest-path "$here/Cargo.toml"
bin=$here/target/release/phalanx
for n in ${WORLDS//,/ }; do
  "$bin" bench allreduce --nproc-per-node "$n" --standalone --sizes "$SIZES" --iters "$ITERS" --json \
    2>/dev/null | sed 's/^\[rank 0\]: //' | grep '^{' > "$out/phalanx-$n.jsonl"
  timeout 600 "$PY" "$anchors/comm/gloo_bench.py" --world "$n" --ops allreduce --sizes "$SIZES" \
    --iters "$ITERS" --out "$out/gloo-$n.jsonl" --tag compare > /dev/null 2>&1 || echo "gloo run failed for n=$n" >&2
done
python3 - "$out" "$WORLDS" <<'PY'
import json, sys, glob, os
out, worlds = sys.argv[1], sys.argv[2].split(",")
for n in worlds:
    ph = {o["bytes"]: o for o in map(json.loads, open(f"{out}/phalanx-{n}.jsonl"))}
    gl = {}
    p = f"{out}/gloo-{n}.jsonl"
    if os.path.exists(p):
        for line in open(p):
            o = json.loads(line)
            if o.get("op") == "allreduce":
                gl[o["bytes"]] = o
    print(f"\n{n} ranks, allreduce f32 (busbw GB/s; time µs for 4K)")
    print(f"{'size':>8} {'phalanx':>10} {'gloo':>10} {'ratio':>7} {'phalanx µs':>11} {'gloo µs':>9}")
    for b in sorted(ph):
        o = ph[b]; g = gl.get(b, {})
        gb = g.get("busbw_GBps", 0.0)
        gt = g.get("median_s", 0.0) * 1e6
        ratio = o["busbw_gbps"] / gb if gb else float("nan")
        print(f"{b:>8} {o['busbw_gbps']:>10.3f} {gb:>10.3f} {ratio:>7.2f} {o['median_s']*1e6:>11.1f} {gt:>9.1f}")
print(f"\nraw results: {out}")
PY
