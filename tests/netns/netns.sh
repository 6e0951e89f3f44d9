#!/usr/bin/env bash
# Simulated hosts for multi-host tests: Linux network namespaces joined by veth pairs to a
# bridge, all of it inside namespaces this script creates (the root namespace is never touched,
# and the namespaces have no route out: only the 10.77.<id>.x addresses assigned here exist).
#
#   phx-<id>-hub       the "switch": bridge br0 (and br1 with --two-ifaces), ports p<i> / q<i>
#   phx-<id>-<i>       host i (i = 0..N-1): lo, eth0 = 10.77.<id>.<i+1>/25 (veth peer p<i> on br0)
#                      with --two-ifaces also eth1 = 10.77.<id>.<129+i>/25 (veth peer q<i> on br1)
#   --rate R           tc tbf on both directions of every host link (host egress and hub egress
#                      toward the host): a full-duplex NIC of rate R per host, e.g. 1gbit
#   --htb              shape with an HTB class of rate and ceil R instead of tbf (a WAN link's
#                      usual shaper; bench/wan_outer.sh)
#
# <id> (1..254) keeps parallel runs apart. It is claimed atomically with mkdir of
# $PHX_NETNS_RUN/<id> (default /run/phx-netns), which also records the owner pid; `up` exits 3
# when the id is taken (pick another), `gc` removes the setups whose owner is gone.
#
# Usage (root, iproute2):
#   netns.sh up N [--id ID] [--rate R [--htb]] [--two-ifaces] [--owner PID]   prints "id=<ID>"
#   netns.sh down [--id ID]     kills every process inside the id's namespaces, deletes them;
#                               safe after a partial `up` and when nothing exists
#   netns.sh gc                 `down` for every id whose owner process has exited
#   netns.sh exec I CMD... [--id ID given before: netns.sh --id ID exec I CMD]
#   netns.sh show [--id ID]     addresses and qdisc counters
# ID defaults to $PHX_NETNS_ID.
set -euo pipefail

RUN=${PHX_NETNS_RUN:-/run/phx-netns}
id=${PHX_NETNS_ID:-}
rate=none
htb=0
two=0
owner=$PPID
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --id) id=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --two-ifaces) two=1; shift ;;
    --htb) htb=1; shift ;;
    --owner) owner=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]+"${args[@]}"}"

die() { echo "netns.sh: $*" >&2; exit 1; }
need_id() {
  [ -n "$id" ] || die "no id: pass --id ID or set PHX_NETNS_ID"
  [[ "$id" =~ ^[0-9]+$ ]] && [ "$id" -ge 1 ] && [ "$id" -le 254 ] || die "id $id: want 1..254"
}
hub() { echo "phx-$id-hub"; }
# Every namespace of this id, hub last.
spaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^phx-$id-[0-9]+\$" | sort -V || true
  ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx "phx-$id-hub" || true
}

shape() {  # namespace device
  [ "$rate" = none ] && return 0
  if [ $htb = 1 ]; then
    ip netns exec "$1" tc qdisc replace dev "$2" root handle 1: htb default 10
    ip netns exec "$1" tc class add dev "$2" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" quantum 60000
    return 0
  fi
  # latency bounds the tbf queue (how long a packet may wait), it adds no delay.
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst 256kb latency 20ms
}

# lo up; no IPv6, so the only traffic on a link is what the test sends (no router
# solicitations or DAD in the interface counters).
quiet() {
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip netns exec "$1" ip link set lo up
}

down() {
  need_id
  local ns p
  for ns in $(spaces); do
    # Processes left inside our namespaces were started by our callers; end them by pid.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
  for ns in $(spaces); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "${RUN:?}/$id"
}

up() {
  local n=${1:?usage: netns.sh up N [--id ID] [--rate R] [--two-ifaces]}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 126 ] || die "N=$n: want 1..126"
  need_id
  mkdir -p "$RUN"
  # The claim: atomic, so two runs that drew the same id cannot both proceed.
  mkdir "$RUN/$id" 2>/dev/null || { echo "netns.sh: id $id is in use" >&2; exit 3; }
  echo "$owner" > "$RUN/$id/owner"
  trap 'rc=$?; if [ $rc != 0 ]; then down; fi; exit $rc' EXIT
  local h i
  h=$(hub)
  ip netns add "$h"
  quiet "$h"
  for b in br0 $([ $two = 1 ] && echo br1); do
    ip netns exec "$h" ip link add "$b" type bridge
    ip netns exec "$h" ip link set "$b" up
  done
  for ((i = 0; i < n; i++)); do
    local ns=phx-$id-$i
    ip netns add "$ns"
    quiet "$ns"
    # Created directly inside the namespaces: no name ever appears in the root namespace.
    ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$h"
    ip netns exec "$ns" ip addr add "10.77.$id.$((i + 1))/25" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$h" ip link set "p$i" master br0 up
    shape "$ns" eth0
    shape "$h" "p$i"
    if [ $two = 1 ]; then
      ip link add eth1 netns "$ns" type veth peer name "q$i" netns "$h"
      ip netns exec "$ns" ip addr add "10.77.$id.$((i + 129))/25" dev eth1
      ip netns exec "$ns" ip link set eth1 up
      ip netns exec "$h" ip link set "q$i" master br1 up
      shape "$ns" eth1
      shape "$h" "q$i"
    fi
  done
  trap - EXIT
  echo "id=$id"
}

gc() {
  [ -d "$RUN" ] || return 0
  local d o
  for d in "$RUN"/*/; do
    [ -d "$d" ] || continue
    id=$(basename "$d")
    # The owner file is read once: an id with no owner file yet, or an empty one, was just
    # claimed by a run that is still writing it (read twice, a file written in between made a
    # claimed id look abandoned, and another run's setup was removed). Owner still running:
    # its setup, leave it.
    o=$(cat "$d/owner" 2>/dev/null) || continue
    [ -n "$o" ] || continue
    if kill -0 "$o" 2>/dev/null; then continue; fi
    down
    echo "gc: removed id $id (owner $o gone)"
  done
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  gc) gc ;;
  exec)
    need_id
    i=${2:?usage: netns.sh exec I CMD...}; shift 2
    exec ip netns exec "phx-$id-$i" "$@" ;;
  show)
    need_id
    for ns in $(spaces); do
      echo "== $ns"
      ip netns exec "$ns" ip -brief addr
      ip netns exec "$ns" tc -s qdisc show | grep -E 'qdisc (tbf|htb)|Sent' || true
    done ;;
  *) sed -n 2,24p "$0"; exit 2 ;;
esac
