#!/usr/bin/env bash
# Allreduce across 2 simulated hosts, phalanx next to Gloo, unshaped and at a tbf rate, in
# one session (root). Not a test: figures for docs/multihost.md and the issue's closing note.
#
#   bash tests/netns/measure.sh [SIZE=64M] [RATE=1gbit] [ITERS=10] [REPS=2]
#   HOSTS=4 runs one rank on each of 4 hosts (default 2)
#   BF16_SIZE=32M adds a phalanx bf16 row of that size (64M of f32 = 32M of bf16, same count)
#
# Per link setting: iperf3 between the two hosts (the TCP goodput), then REPS rounds of
# phalanx bench allreduce and Gloo (../shared/anchors/comm/gloo_netns.sh) alternated, so
# both see the same box. Every timed step holds /tmp/anchors.lock (the box is shared).
# Results: $OUT (default /tmp/phx-measure), one jsonl per tool; the summary on stdout.
# Env: PHALANX (binary, default target/release or target/debug), ANCHORS (the anchors
# comm directory), PY (python with torch for Gloo).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
size=${1:-64M}; rate=${2:-1gbit}; iters=${3:-10}; reps=${4:-2}
OUT=${OUT:-/tmp/phx-measure}
ANCHORS=${ANCHORS:-$root/../shared/anchors/comm}
PY=${PY:-${ANCHORS_VENV:-$HOME/.cache/phalanx-anchors}/bin/python}
PHALANX=${PHALANX:-$( [ -x "$root/target/release/phalanx" ] && echo "$root/target/release/phalanx" || echo "$root/target/debug/phalanx")}
LOCK=${LOCK:-/tmp/anchors.lock}
HOSTS=${HOSTS:-2}
export PHALANX_TOKEN=${PHALANX_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
mkdir -p "$OUT"
id=""
cleanup() {
  [ -n "$id" ] && bash "$here/netns.sh" down --id "$id" >/dev/null 2>&1 || true
  PFX=phxm SUBNET=10.77.250 bash "$ANCHORS/netns.sh" down >/dev/null 2>&1 || true
}
trap cleanup EXIT

noise() { echo "# noise: load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"; }

up() {  # rate
  local r=$1
  for try in $(seq 1 20); do
    id=$((RANDOM % 200 + 20))
    if bash "$here/netns.sh" up "$HOSTS" --id "$id" --rate "$r" --owner $$ >/dev/null 2>"$OUT/up.err"; then return 0; fi
    [ $? = 3 ] || { cat "$OUT/up.err" >&2; exit 1; }
  done
  echo "no free id" >&2; exit 1
}

iperf() {  # label
  ip netns exec "phx-$id-1" iperf3 -s -B "10.77.$id.2" -p 5201 -D -1 >/dev/null; sleep 0.3
  ip netns exec "phx-$id-0" iperf3 -c "10.77.$id.2" -p 5201 -t 4 -J > "$OUT/iperf.json"
  python3 -c "import json;e=json.load(open('$OUT/iperf.json'))['end'];print('iperf3 $1: %.3f Gbit/s (%.1f MB/s) retransmits=%s' % (e['sum_received']['bits_per_second']/1e9, e['sum_received']['bits_per_second']/8e6, e['sum_sent'].get('retransmits')))"
}

phalanx_once() {  # label [dtype size]
  local pids=() i dtype=${2:-f32} sz=${3:-$size}
  for ((i = 0; i < HOSTS; i++)); do
    ip netns exec "phx-$id-$i" timeout 300 "$PHALANX" bench allreduce --nnodes "$HOSTS" --node-rank $i \
      --nproc-per-node 1 --master-addr "10.77.$id.1" --master-port 29500 \
      --sizes "$sz" --dtype "$dtype" --iters "$iters" --warmup 2 --json > "$OUT/phalanx.$i.out" 2>"$OUT/phalanx.$i.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$OUT"/phalanx.*.err >&2; exit 1; }; done
  grep -h '"op"' "$OUT/phalanx.0.out" | sed "s/^\[rank 0\]: //; s/}\$/,\"link\":\"$1\"}/" | tee -a "$OUT/phalanx.jsonl"
}

gloo_once() {  # rate label
  PFX=phxm SUBNET=10.77.250 bash "$ANCHORS/gloo_netns.sh" "$HOSTS" "$1" "$size" "$iters" allreduce \
    "$OUT/gloo.jsonl" "$2" | grep -E '^allreduce' || true
}

for link in none "$rate"; do
  echo "== link: $link (size $size, $iters iters, $reps reps, $PHALANX)"
  up "$link"
  flock "$LOCK" bash -c "$(declare -f noise iperf); OUT=$OUT id=$id; noise; iperf $link"
  PFX=phxm SUBNET=10.77.250 bash "$ANCHORS/netns.sh" up "$HOSTS" "$link" >/dev/null
  for ((r = 0; r < reps; r++)); do
    flock "$LOCK" bash -c "$(declare -f noise phalanx_once); OUT=$OUT id=$id PHALANX=$PHALANX size=$size iters=$iters HOSTS=$HOSTS; noise; echo -n 'phalanx: '; phalanx_once $link"
    flock "$LOCK" bash -c "$(declare -f noise gloo_once); OUT=$OUT ANCHORS=$ANCHORS size=$size iters=$iters HOSTS=$HOSTS; noise; echo -n 'gloo: '; gloo_once $link gloo-$link"
    if [ -n "${BF16_SIZE:-}" ]; then
      # The same element count in bf16: what compressing f32 gradients to bf16 buys on the wire.
      flock "$LOCK" bash -c "$(declare -f noise phalanx_once); OUT=$OUT id=$id PHALANX=$PHALANX size=$size iters=$iters HOSTS=$HOSTS; noise; echo -n 'phalanx bf16: '; phalanx_once $link bf16 $BF16_SIZE"
    fi
  done
  bash "$here/netns.sh" down --id "$id" >/dev/null; id=""
  PFX=phxm SUBNET=10.77.250 bash "$ANCHORS/netns.sh" down >/dev/null
done
