#!/usr/bin/env bash
# Training across a slow link (docs/outer.md): 2 simulated hosts (network namespaces,
# tests/netns/netns.sh) x 2 ranks, the link of each host capped at RATE each way with HTB.
# Columns: DDP, HSDP, DiLoCo at H 20 and 100, Streaming DiLoCo at H 100 in 4 fragments
# (each sync overlapping 5 inner steps), and DiLoCo at H 100 with int8 and fp4
# pseudo-gradients. Per column: wall time on the capped link, the bytes that crossed it (host
# 0's eth0 counters, both directions), and compute utilisation: the same run's wall time on an
# unshaped link over its wall time on the capped one. Needs root and iproute2; build first
# (cargo build --release -p phalanx-cli).
#
#   bash bench/wan_outer.sh                 # RATE=50mbit EPOCHS=3, the CNN on mnist5k
#   RATE=10mbit EPOCHS=5 bash bench/wan_outer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-50mbit}
EPOCHS=${EPOCHS:-3}
P=${PHALANX:-$PWD/target/release/phalanx}
NETNS=$PWD/tests/netns/netns.sh
MODEL=(--model cnn --dataset mnist5k --epochs "$EPOCHS" --batch-size 32 --optimizer adam --lr 0.001)
export PHALANX_TOKEN=5a5a5a5a00112233445566778899aabbccddeeff00112233445566778899aabb
[ -x "$P" ] || { echo "no $P: cargo build --release -p phalanx-cli" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }

shaped_id=201 plain_id=202
cleanup() { bash "$NETNS" down --id $shaped_id || true; bash "$NETNS" down --id $plain_id || true; }
trap cleanup EXIT
cleanup
bash "$NETNS" up 2 --id $shaped_id --rate "$RATE" --htb --owner $$ >/dev/null
bash "$NETNS" up 2 --id $plain_id --owner $$ >/dev/null

bytes() {  # id: host 0's eth0 bytes, sent and received
  local d=/sys/class/net/eth0/statistics
  ip netns exec "phx-$1-0" sh -c "echo \$((\$(cat $d/tx_bytes) + \$(cat $d/rx_bytes)))"
}

# One run on setup $1 with the flags after it; prints "seconds bytes accuracy".
run() {
  local id=$1; shift
  local before; before=$(bytes "$id")
  local start; start=$(date +%s.%N)
  local out; out=$(mktemp -d)
  for i in 0 1; do
    timeout 900 ip netns exec "phx-$id-$i" "$P" train --nnodes 2 --node-rank $i \
      --nproc-per-node 2 --master-addr "10.77.$id.1" --master-port 29500 --json \
      "${MODEL[@]}" "$@" >"$out/$i" 2>"$out/$i.err" &
  done
  wait
  local secs; secs=$(echo "$(date +%s.%N) - $start" | bc)
  local moved=$(( $(bytes "$id") - before ))
  local acc; acc=$(grep -h '"event":"summary"' "$out"/0 | grep '"rank":0' \
    | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["test_accuracy"])' \
    || { cat "$out"/*.err >&2; echo nan; })
  rm -rf "$out"
  echo "$secs $moved $acc"
}

printf '%-34s %9s %9s %12s %8s %6s\n' run "capped s" "free s" "bytes" accuracy util
for col in "ddp|" "hsdp|--sharding hybrid" \
  "diloco H20|--outer diloco --sync-every 20" "diloco H100|--outer diloco --sync-every 100" \
  "streaming H100 F4 T5|--outer streaming-diloco --sync-every 100 --fragments 4 --fragment-delay 5" \
  "diloco H100 int8|--outer diloco --sync-every 100 --outer-dtype int8" \
  "diloco H100 fp4|--outer diloco --sync-every 100 --outer-dtype fp4"; do
  name=${col%%|*} flags=${col#*|}
  # shellcheck disable=SC2086 # the flags are words
  read -r free _ _ < <(run $plain_id $flags)
  # shellcheck disable=SC2086
  read -r capped moved acc < <(run $shaped_id $flags)
  printf '%-34s %9.1f %9.1f %12d %8s %5.0f%%\n' "$name" "$capped" "$free" "$moved" "$acc" \
    "$(echo "100 * $free / $capped" | bc -l)"
done
