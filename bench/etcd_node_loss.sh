#!/usr/bin/env bash
# What losing a whole host costs a fault-tolerant job whose store is etcd: 3 network-namespace
# hosts, each running an etcd member and an agent (`--rdzv-backend etcd --nnodes 2:3
# --fault-tolerance`, one rank each), and every process of one host SIGKILLed at once: node 0's
# and node 2's with etcd's leader moved onto it first, node 1's with the leader elsewhere. These
# are the drills of crates/cli/tests/netns_etcd.rs; each prints when a survivor's group failed
# and when its next step came, both from the kill's wall clock. Run for each etcd election
# timeout in ELECTION_MS (the test clusters' `--election-timeout`, heartbeats a tenth of it;
# 1000 is etcd's default), REPS times each, and summarized per host.
#
# Measured (docs/launch.md, "A request a member will never answer"): at a 200 ms election
# timeout, node 0's host with etcd's leader 0.42-1.12 s to the next step (16 drills, 15 under
# 1 s), node 2's 0.59-1.05 s, node 1's 0.19-0.77 s; at etcd's default of 1 s, node 0's
# 1.23-2.51 s and node 2's 1.73-1.94 s, which is etcd's own election.
#
# Usage: sudo bench/etcd_node_loss.sh [REPS]   (root, for the namespaces; needs etcd and
# etcdctl; ELECTION_MS="200 1000" by default)
set -u
REPS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ELECTION_MS=${ELECTION_MS:-200 1000}
command -v etcd >/dev/null && command -v etcdctl >/dev/null \
  || { echo "needs etcd and etcdctl (apt-get install etcd-server etcd-client)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
cd "$ROOT"
cargo test --locked -p phalanx-cli --test netns_etcd --no-run -q 2>/dev/null \
  || { echo "cannot build the drills: cargo test -p phalanx-cli --test netns_etcd --no-run" >&2; exit 1; }
OUT=$(mktemp /tmp/etcd-node-loss.XXXX)
trap 'rm -f "$OUT"' EXIT
for ms in $ELECTION_MS; do
  : >"$OUT"
  for rep in $(seq "$REPS"); do
    PHALANX_TEST_ETCD_ELECTION_MS=$ms cargo test --locked -q -p phalanx-cli --test netns_etcd \
      -- losing_node --nocapture --test-threads 1 2>&1 | grep -o "node [0-9]*'s host lost.*" >>"$OUT"
  done
  echo "== etcd election timeout $ms ms, $REPS run(s)"
  for g in 0 1 2; do
    grep "^node $g's host lost" "$OUT" | sed 's/.*next step came \([0-9.]*\) s.*/\1/' | sort -n \
      | awk -v g="$g" '{v[NR] = $1} END {
          if (NR == 0) { printf "node %s: no drill finished\n", g; exit }
          printf "node %s: %d drill(s), kill -> next step %.2f-%.2f s, median %.2f s\n",
            g, NR, v[1], v[NR], v[int((NR + 1) / 2)] }'
  done
done
