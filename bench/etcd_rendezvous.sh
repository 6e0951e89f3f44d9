#!/usr/bin/env bash
# phalanx's etcd rendezvous (etcd's v3 API) against torchrun's (`--rdzv-backend etcd-v2`, etcd's
# v2 API through python-etcd), on one 3-member etcd cluster started here (Debian's etcd 3.4,
# which still serves v2 with --enable-v2; etcd 3.6 removed it, so torchrun's backend has no
# future there). Two figures, interleaved, medians of REPS:
#   1. rendezvous: 3 agents × 1 Python worker that prints its rank, start to every agent's exit;
#   2. node 0 lost: 3 agents `--nnodes 2:3 --max-restarts 1`, PyTorch workers that all_reduce
#      over gloo every 50 ms; the agent holding rank 0 and its worker SIGKILLed; seconds until
#      the two others' workers have met again as a world of 2 (or "no" within 60 s). Both
#      restart the round: the time includes importing torch again.
#
# Usage: bench/etcd_rendezvous.sh [REPS]   (needs etcd, the anchors venv with torch and
# python-etcd: `~/.cache/phalanx-anchors/bin/pip install python-etcd`, and a release build:
# `cargo build --release -p phalanx-cli`)
set -u
REPS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PHALANX=$ROOT/target/release/phalanx
VENV=${PHALANX_ANCHORS:-$HOME/.cache/phalanx-anchors}
PY=$VENV/bin/python
D=$(mktemp -d /dev/shm/etcd-bench.XXXX)
export PHALANX_TOKEN=$(openssl rand -hex 32) PHALANX_PYTHON=$PY PHALANX_TIMEOUT=60s
trap 'kill $(cat $D/*.pid 2>/dev/null) 2>/dev/null; pkill -P $$ 2>/dev/null; sleep 0.3; [ -n "${KEEP:-}" ] || rm -rf "$D"' EXIT
[ -x "$PHALANX" ] || { echo "no $PHALANX: cargo build --release -p phalanx-cli" >&2; exit 1; }
"$PY" -c "import etcd, torch" 2>/dev/null || { echo "$PY lacks torch or python-etcd" >&2; exit 1; }

base=$((20000 + RANDOM % 20000))
EPS=""; INIT=""
for i in 0 1 2; do
  EPS+="${EPS:+,}127.0.0.1:$((base + i))"; INIT+="${INIT:+,}m$i=http://127.0.0.1:$((base + 10 + i))"
done
for i in 0 1 2; do
  etcd --name m$i --data-dir $D/m$i --enable-v2=true \
    --listen-client-urls http://127.0.0.1:$((base + i)) --advertise-client-urls http://127.0.0.1:$((base + i)) \
    --listen-peer-urls http://127.0.0.1:$((base + 10 + i)) --initial-advertise-peer-urls http://127.0.0.1:$((base + 10 + i)) \
    --initial-cluster $INIT --heartbeat-interval 50 --election-timeout 500 > $D/etcd$i.log 2>&1 &
  echo $! > $D/etcd$i.pid
done
until ETCDCTL_API=3 etcdctl --endpoints $EPS put /ready 1 >/dev/null 2>&1; do sleep 0.2; done
now() { date +%s.%N; }

cat > $D/hello.py <<'PY'
import os
print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"])
PY
cat > $D/idle.py <<'PY'
# A data-parallel loop's shape: an all_reduce every 50 ms until told to stop. A lost peer
# fails it (gloo sees the connection close), which is how torchrun's agents learn of it.
import os, sys, time
import torch, torch.distributed as dist
d = sys.argv[1]
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
with open(os.path.join(d, "log"), "a") as f:
    f.write(f"{os.environ['TORCHELASTIC_RESTART_COUNT']} {dist.get_rank()} {dist.get_world_size()}\n")
while not os.path.exists(os.path.join(d, "done")):
    dist.all_reduce(t)
    time.sleep(0.05)
dist.destroy_process_group()
PY

# agents TOOL ID NNODES PROGRAM...: starts 3 agents in the background, pids in $D/agents.
agents() {
  local tool=$1 id=$2 nnodes=$3; shift 3
  : > $D/agents
  for i in 0 1 2; do
    if [ "$tool" = phalanx ]; then
      "$PHALANX" launch --rdzv-backend etcd --rdzv-endpoint $EPS --rdzv-id $id --nnodes $nnodes \
        --nproc-per-node 1 --rdzv-last-call 2 --max-restarts 1 -- "$@" > $D/$id.$i.log 2>&1 &
    else
      # torchrun's etcd backends take one endpoint.
      "$VENV/bin/torchrun" --rdzv-backend etcd-v2 --rdzv-endpoint ${EPS%%,*} --rdzv-id $id \
        --nnodes $nnodes --nproc-per-node 1 --max-restarts 1 "$@" > $D/$id.$i.log 2>&1 &
    fi
    echo $! >> $D/agents
  done
}

rendezvous() { # TOOL REP → seconds
  local t0; t0=$(now)
  agents "$1" "rdzv-$1-$2" 3 $D/hello.py
  for p in $(cat $D/agents); do wait "$p"; done
  echo "$(now) - $t0" | bc
}

node0() { # TOOL REP → seconds from the kill to a world of 2 running again, or "no"
  local id="drill-$1-$2" run=$D/drill-$1-$2
  mkdir -p $run
  agents "$1" "$id" 2:3 $D/idle.py $run
  local t=0
  while [ "$(cat $run/log 2>/dev/null | wc -l)" -lt 3 ] && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
  # The agent holding rank 0: the parent of the worker whose RANK is 0.
  local w a
  w=$(for p in $(pgrep -f "idle.py $run"); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=0 && echo $p; done | head -1)
  a=$(ps -o ppid= -p "$w" | tr -d ' ')
  local t0; t0=$(now)
  kill -9 "$a" "$w" 2>/dev/null
  local got=no
  for _ in $(seq 600); do
    if [ "$(grep -c '^1 .* 2$' $run/log)" -ge 2 ]; then got=$(echo "$(now) - $t0" | bc); break; fi
    sleep 0.1
  done
  touch $run/done
  # Agents still waiting in a rendezvous (torchrun's etcd-v2 waits up to 600 s for the lost
  # node) are stopped after 10 s.
  for _ in $(seq 100); do
    alive=0; for p in $(cat $D/agents); do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in $(cat $D/agents); do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  echo "$got"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "n/a")}'; }

echo "# etcd 3.4, 3 members on loopback (tmpfs); $REPS reps, interleaved; $(nproc) cores"
for tool in phalanx torchrun; do : > $D/$tool.rdzv; : > $D/$tool.drill; done
for r in $(seq "$REPS"); do
  for tool in phalanx torchrun; do
    rendezvous $tool $r >> $D/$tool.rdzv
    node0 $tool $r >> $D/$tool.drill
  done
done
printf "%-10s %-28s %s\n" tool "rendezvous, 3 agents (s)" "node 0 lost: world of 2 again after (s)"
for tool in phalanx torchrun; do
  printf "%-10s %-28s %s\n" $tool "$(median < $D/$tool.rdzv)" "$(tr '\n' ' ' < $D/$tool.drill)"
done
