#!/usr/bin/env bash
# torchft's own DiLoCo next to `phalanx train --outer diloco` across a slow link (docs/outer.md),
# measured in one run, interleaved: the setup of bench/wan_outer.sh, 2 simulated hosts (network
# namespaces, tests/netns/netns.sh) x 2 ranks, each host's link capped at RATE each way with HTB,
# one island (torchft: replica group) per host, the CNN on mnist5k, batch 32 per rank, Adam(1e-3)
# inside, SGD(0.7, momentum 0.9, Nesterov) outside, H 20 and 100.
#
# torchft (bench/torchft_diloco.py): a lighthouse (torchft_lighthouse) on host 0; per host one
# torchrun of 2 ranks with its own store (DDP over gloo inside the host), torchft's Manager
# (use_async_quorum=False, ProcessGroupGloo) and torchft.local_sgd.DiLoCo across hosts.
# phalanx: target/release/phalanx train with wan_outer.sh's flags.
#
# Per column: wall time on the capped link and on an unshaped one (whole run: start-up,
# rendezvous, training, evaluation), the bytes that crossed the capped link (host 0's eth0
# counters, both directions, everything included: for torchft also the lighthouse's heartbeats),
# test accuracy, utilisation (free wall over capped wall), samples/s as each program counts it
# (train samples over the training loops' time, syncs included, evaluation and start-up
# excluded) on the capped and the free link, and the loop's utilisation (capped samples/s over
# free samples/s: torchft's wall is mostly start-up, Python and torch imported by 4 ranks). Needs root, iproute2, phalanx built
# (cargo build --release -p phalanx-cli) and torchft in the venv TORCHFT_VENV
# (pip install torchft; tested with torchft 0.2.0, torch 2.15 CPU).
#
#   bash bench/wan_torchft.sh                          # RATE=50mbit EPOCHS=3, H 20 and 100
#   EPOCHS=1 SYNCS="20" bash bench/wan_torchft.sh      # a short check
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-50mbit}
EPOCHS=${EPOCHS:-3}
SYNCS=${SYNCS:-20 100}
P=${PHALANX:-$PWD/target/release/phalanx}
VENV=${TORCHFT_VENV:-$HOME/.cache/phalanx-anchors}
NETNS=$PWD/tests/netns/netns.sh
MODEL=(--model cnn --dataset mnist5k --epochs "$EPOCHS" --batch-size 32 --optimizer adam --lr 0.001)
export PHALANX_TOKEN=5a5a5a5a00112233445566778899aabbccddeeff00112233445566778899aabb
[ -x "$P" ] || { echo "no $P: cargo build --release -p phalanx-cli" >&2; exit 1; }
[ -x "$VENV/bin/torchft_lighthouse" ] || { echo "no torchft in $VENV: $VENV/bin/pip install torchft" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }

shaped_id=${SHAPED_ID:-203} plain_id=${PLAIN_ID:-204}
logs=$(mktemp -d)
# `down` ends every process left inside the namespaces (by pid) and deletes them.
cleanup() {
  bash "$NETNS" down --id $shaped_id || true
  bash "$NETNS" down --id $plain_id || true
  [ -n "${KEEP_LOGS:-}" ] || rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup; mkdir -p "$logs"
bash "$NETNS" up 2 --id $shaped_id --rate "$RATE" --htb --owner $$ >/dev/null
bash "$NETNS" up 2 --id $plain_id --owner $$ >/dev/null

bytes() {  # id: host 0's eth0 bytes, sent and received
  local d=/sys/class/net/eth0/statistics
  ip netns exec "phx-$1-0" sh -c "echo \$((\$(cat $d/tx_bytes) + \$(cat $d/rx_bytes)))"
}

# rank 0's summary line in file $1 -> "accuracy samples_per_s"
summary() {
  grep -h '"event": *"summary"' "$1" | head -1 | python3 -c 'import json,sys
s = json.loads(sys.stdin.read()); print(s["test_accuracy"], s["samples_per_s"])'
}

# phalanx on setup $1, sync every $2; prints "seconds bytes accuracy samples_per_s".
run_phalanx() {
  local id=$1 h=$2 out=$logs/phalanx-$1-$2 i
  mkdir -p "$out"
  local before; before=$(bytes "$id")
  local start; start=$(date +%s.%N)
  for i in 0 1; do
    timeout 900 ip netns exec "phx-$id-$i" "$P" train --nnodes 2 --node-rank $i \
      --nproc-per-node 2 --master-addr "10.77.$id.1" --master-port 29500 --json \
      "${MODEL[@]}" --outer diloco --sync-every "$h" >"$out/$i" 2>"$out/$i.err" &
  done
  wait
  local secs; secs=$(echo "$(date +%s.%N) - $start" | bc)
  local moved=$(( $(bytes "$id") - before ))
  local fig; fig=$(grep -h '"event":"summary"' "$out/0" | grep '"rank":0' > "$out/sum" && summary "$out/sum") \
    || { cat "$out"/*.err >&2; fig="nan nan"; }
  echo "$secs $moved $fig"
}

# torchft on setup $1, sync every $2; prints "seconds bytes accuracy samples_per_s".
run_torchft() {
  local id=$1 h=$2 out=$logs/torchft-$1-$2 i
  mkdir -p "$out"
  local before; before=$(bytes "$id")
  local start; start=$(date +%s.%N)
  timeout 900 ip netns exec "phx-$id-0" "$VENV/bin/torchft_lighthouse" --min_replicas 2 \
    --bind 0.0.0.0:29610 --quorum_tick_ms 100 >"$out/lighthouse" 2>&1 &
  local lighthouse=$!
  local workers=()
  for i in 0 1; do
    timeout 900 ip netns exec "phx-$id-$i" env GLOO_SOCKET_IFNAME=eth0 \
      "$VENV/bin/torchrun" --nnodes 1 --node-rank 0 --nproc-per-node 2 \
      --master-addr "10.77.$id.$((i + 1))" --master-port 29600 bench/torchft_diloco.py \
      --replica-id $i --replicas 2 --lighthouse "http://10.77.$id.1:29610" \
      --host "10.77.$id.$((i + 1))" --sync-every "$h" --epochs "$EPOCHS" --batch 32 --lr 0.001 \
      >"$out/$i" 2>"$out/$i.err" &
    workers+=($!)
  done
  local rc=0
  for i in "${workers[@]}"; do wait "$i" || rc=$?; done
  local secs; secs=$(echo "$(date +%s.%N) - $start" | bc)
  kill "$lighthouse" 2>/dev/null || true
  wait "$lighthouse" 2>/dev/null || true
  local moved=$(( $(bytes "$id") - before ))
  local fig; fig=$( [ $rc = 0 ] && summary "$out/0") || { tail -20 "$out"/*.err >&2; fig="nan nan"; }
  echo "$secs $moved $fig"
}

printf '%-22s %9s %9s %12s %8s %6s %10s %10s %9s\n' run "capped s" "free s" "bytes" accuracy util \
  "samples/s" "free smp/s" "loop util"
for h in $SYNCS; do
  for sys in phalanx torchft; do
    read -r free _ _ free_sps < <(run_$sys $plain_id "$h")
    read -r capped moved acc sps < <(run_$sys $shaped_id "$h")
    printf '%-22s %9.1f %9.1f %12d %8s %5.0f%% %10.0f %10.0f %8.0f%%\n' "$sys diloco H$h" "$capped" \
      "$free" "$moved" "$acc" "$(echo "100 * $free / $capped" | bc -l)" "$sps" "$free_sps" \
      "$(python3 -c "print(100 * $sps / $free_sps)" 2>/dev/null || echo nan)"
  done
done
