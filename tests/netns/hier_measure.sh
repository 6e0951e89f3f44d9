#!/usr/bin/env bash
# 2 hosts x 2 ranks at RATE (tc tbf rate, or "none"): flat ring vs PHALANX_ALGO=hierarchical,
# alternated, 64 MiB and 16 MiB busbw from rank 0. Root. Usage: hier_measure.sh [RATE=1gbit] [REPS=3]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); cd "$here/../.."
RATE=${1:-1gbit}; REPS=${2:-3}
id=$((RANDOM % 100 + 120))
bash tests/netns/netns.sh up 2 --id $id --rate $RATE --owner $$ >/dev/null
trap 'bash tests/netns/netns.sh down --id $id >/dev/null 2>&1' EXIT
export PHALANX_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
P=${PHALANX:-$PWD/target/release/phalanx}
run() { # algo
  port=$((30000 + RANDOM % 5000))
  for i in 0 1; do
    ip netns exec phx-$id-$i env PHALANX_ALGO=$1 PHALANX_TOKEN=$PHALANX_TOKEN $P launch --nnodes 2 --node-rank $i --nproc-per-node 2 --master-addr 10.77.$id.1 --master-port $port -- $P bench allreduce --sizes 16M,64M --iters 5 --warmup 1 --json > ${TMPDIR:-/tmp}/hier_$i.out 2>${TMPDIR:-/tmp}/hier_$i.err &
  done
  wait
  grep -h '"bytes":67108864' ${TMPDIR:-/tmp}/hier_0.out | sed 's/.*busbw_gbps":\([0-9.]*\).*/\1/' | tr '\n' ' '
  grep -h '"bytes":16777216' ${TMPDIR:-/tmp}/hier_0.out | sed 's/.*busbw_gbps":\([0-9.]*\).*/\1/'
}
for r in $(seq 1 $REPS); do
  echo "rep $r flat(64M 16M): $(run auto)   hierarchical: $(run hierarchical)"
done
