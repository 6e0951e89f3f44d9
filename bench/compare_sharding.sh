#!/usr/bin/env bash
# Sharded training next to DDP and PyTorch (FSDP2 and DDP, CPU, gloo; FSDP2 also over backend
# phalanx through phalanx_torch when it is installed) on the same MLP, same run,
# interleaved: every round runs each phalanx mode and each PyTorch configuration once, in turn;
# the table holds medians of samples/s and the median round's memory.
#
# Usage: bash bench/compare_sharding.sh [ROUNDS] [RANKS] [HIDDEN] [DEPTH] [STEPS] [BATCH]
#   bash bench/compare_sharding.sh 3 2 2048 2 40 64   # the big MLP (5.8 M parameters), 2 ranks
#   bash bench/compare_sharding.sh 1 4 4096 7 2 64    # 104 M parameters, 4 ranks: memory
# Needs target/release/phalanx (cargo build --release -p phalanx-cli) and the anchors' venv
# (../shared/anchors/setup.sh: PyTorch 2.15) or PYTHON=... with torch.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} RANKS=${2:-2} HIDDEN=${3:-2048} DEPTH=${4:-2} STEPS=${5:-40} BATCH=${6:-64}
PY=${PYTHON:-$HOME/.cache/phalanx-anchors/bin/python}
PHX=target/release/phalanx
WARMUP=$(( STEPS > 10 ? 5 : 1 ))
out=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for mode in none optimizer grad full; do
    "$PHX" bench train --worlds "$RANKS" --hidden "$HIDDEN" --depth "$DEPTH" --optimizer adam \
      --batch-size "$BATCH" --steps "$STEPS" --warmup "$WARMUP" --sharding "$mode" --json \
      | grep '^{' >> "$out"
  done
  "$PHX" bench train --worlds "$RANKS" --hidden "$HIDDEN" --depth "$DEPTH" --optimizer adam \
    --batch-size "$BATCH" --steps "$STEPS" --warmup "$WARMUP" --sharding full \
    --reshard-after-forward false --json | grep '^{' | sed 's/"sharding":"full"/"sharding":"full, keep"/' >> "$out"
  for mode in fsdp2 ddp; do
    "$PY" -m torch.distributed.run --standalone --nproc_per_node "$RANKS" bench/fsdp2_torch.py \
      --hidden "$HIDDEN" --depth "$DEPTH" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
      --mode "$mode" 2>/dev/null | grep '^{' >> "$out"
  done
  if "$PY" -c 'import phalanx_torch' 2>/dev/null; then
    "$PY" -m torch.distributed.run --standalone --nproc_per_node "$RANKS" bench/fsdp2_torch.py \
      --hidden "$HIDDEN" --depth "$DEPTH" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
      --mode fsdp2 --backend phalanx 2>/dev/null | grep '^{' \
      | sed 's/"bench": "torch_fsdp2"/"bench": "torch_fsdp2 (phalanx)"/' >> "$out"
  fi
done
"$PY" - "$out" <<'EOF'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
def key(r):
    return r.get("sharding") and "phalanx " + r["sharding"] or "torch " + r["bench"][6:]
groups = {}
for r in rows:
    groups.setdefault(key(r), []).append(r)
ddp = statistics.median(r["samples_per_s"] for r in groups["phalanx none"])
print(f"{'who':<22} {'samples/s':>10} {'x ddp':>6} {'params':>8} {'grads':>8} {'optim':>8} {'state':>8} {'peak RSS':>9}  (MiB per rank; {len(groups['phalanx none'])} round(s))")
for k, rs in groups.items():
    rs = sorted(rs, key=lambda r: r["samples_per_s"])
    m = rs[len(rs) // 2]
    sps = m["samples_per_s"]
    state = m["params_mib"] + m["grads_mib"] + m["optim_mib"]
    rss = max(m["peak_rss_mib"], m.get("build_rss_mib", 0))
    print(f"{k:<22} {sps:>10.1f} {sps / ddp:>6.2f} {m['params_mib']:>8.1f} {m['grads_mib']:>8.1f} {m['optim_mib']:>8.1f} {state:>8.1f} {rss:>9.0f}")
EOF
rm -f "$out"
