#!/usr/bin/env bash
# What losing etcd's leader costs a fault-tolerant job that lost nothing of its own: a 3-member
# etcd cluster on loopback (Debian's etcd 3.4, etcd's default timing: 100 ms heartbeats, a 1 s
# election timeout), 2 agents × 1 rank training through it (`--rdzv-backend etcd
# --fault-tolerance`, mnist5k, EPOCHS epochs), and the member that leads SIGKILLed KILL_AFTER
# seconds in. Prints, per repetition, the median epoch and the three slowest, each with when it
# ended relative to the kill: an epoch that holds an election's wait stands out.
#
# Measured (Note [A poll reads serializably] in crates/store/src/etcd/poll.rs): the epoch
# holding the kill took 1.25 s and 1.61 s against medians of 0.23 s and 0.17 s while the
# workers' generation poll went through etcd's leader; 0.42, 0.41 and 0.43 s (medians 0.18,
# 0.15 and 0.11 s) once it did not.
#
# Usage: bench/etcd_leader_loss.sh [REPS]   (needs etcd and etcdctl; BIN=path/to/phalanx,
# default target/debug/phalanx: the figures are relative, so a debug build serves)
set -u
REPS=${1:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/debug/phalanx}
EPOCHS=${EPOCHS:-60}
KILL_AFTER=${KILL_AFTER:-4}
[ -x "$BIN" ] || { echo "no $BIN: cargo build -p phalanx-cli" >&2; exit 1; }
command -v etcd >/dev/null && command -v etcdctl >/dev/null \
  || { echo "needs etcd and etcdctl (apt-get install etcd-server etcd-client)" >&2; exit 1; }
D=$(mktemp -d /tmp/etcd-leader-loss.XXXX)
trap 'kill -9 $(cat $D/*.pid 2>/dev/null) 2>/dev/null; pkill -P $$ 2>/dev/null; sleep 0.3; [ -n "${KEEP:-}" ] || rm -rf "$D"' EXIT
export ETCDCTL_API=3 PHALANX_TOKEN=$(openssl rand -hex 32) PHALANX_TIMEOUT=30s

for rep in $(seq "$REPS"); do
  base=$((20000 + RANDOM % 20000)) EPS="" INIT=""
  for i in 0 1 2; do
    EPS+="${EPS:+,}127.0.0.1:$((base + i))"; INIT+="${INIT:+,}m$i=http://127.0.0.1:$((base + 10 + i))"
  done
  for i in 0 1 2; do
    etcd --name m$i --data-dir "$D/r$rep-m$i" \
      --listen-client-urls http://127.0.0.1:$((base + i)) --advertise-client-urls http://127.0.0.1:$((base + i)) \
      --listen-peer-urls http://127.0.0.1:$((base + 10 + i)) --initial-advertise-peer-urls http://127.0.0.1:$((base + 10 + i)) \
      --initial-cluster "$INIT" --initial-cluster-state new --initial-cluster-token "r$rep-$base" \
      --heartbeat-interval 100 --election-timeout 1000 >"$D/r$rep-m$i.log" 2>&1 &
    echo $! >"$D/m$i.pid"
    disown  # its SIGKILL below is the point, not news
  done
  until etcdctl --endpoints "$EPS" --dial-timeout 1s put /ready 1 >/dev/null 2>&1; do sleep 0.2; done
  for n in 0 1; do
    "$BIN" train --rdzv-backend etcd --rdzv-endpoint "$EPS" --rdzv-id "leader-loss-$rep" \
      --nnodes 2 --nproc-per-node 1 --fault-tolerance --dataset mnist5k --epochs "$EPOCHS" \
      --batch-size 16 --hidden 128 --json 2>"$D/r$rep-a$n.err" \
      | python3 -u -c 'import sys, time
for line in sys.stdin: print(f"{time.time():.4f} {line}", end="", flush=True)' >"$D/r$rep-a$n.out" &
  done
  sleep "$KILL_AFTER"
  leader=$(etcdctl --endpoints "$EPS" endpoint status -w json | python3 -c '
import json, sys
for i, e in enumerate(json.load(sys.stdin)):
    if e["Status"]["header"]["member_id"] == e["Status"]["leader"]: print(i)')
  killed=$(python3 -c 'import time; print(f"{time.time():.4f}")')
  kill -9 "$(cat "$D/m$leader.pid")"
  while pgrep -f "rdzv-id leader-loss-$rep" >/dev/null; do sleep 0.5; done
  kill -9 $(cat "$D"/m*.pid) 2>/dev/null
  cat "$D/r$rep-a0.out" "$D/r$rep-a1.out" | python3 -c '
import json, sys
killed, rep, leader = float(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = []
for line in sys.stdin:
    t, _, j = line.partition(" ")
    if "\"event\":\"epoch\"" in j:
        rows.append((float(t) - killed, json.loads(j)["seconds"]))
if not rows:
    sys.exit(f"rep {rep}: no epoch lines (the job failed?)")
secs = sorted(s for _, s in rows)
slow = sorted(rows, key=lambda r: -r[1])[:3]
print(f"rep {rep}: member {leader} (the leader) SIGKILLed; {len(rows)} epochs, median "
      f"{secs[len(secs) // 2]:.3f} s; slowest: "
      + ", ".join(f"{s:.3f} s (ended {at:+.2f} s from the kill)" for at, s in slow))' \
    "$killed" "$rep" "$leader"
done
