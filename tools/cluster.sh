#!/usr/bin/env bash
# cluster.sh — emulated nodes on this machine, for multi-node runs: each
# node a network namespace of its own with its own address on a private
# bridge and (for the processes entered into it) its own hostname, the
# link between nodes shaped to a rate (tc tbf on both ends of its veth);
# inside a node processes talk over its loopback, unshaped. Traffic goes
# only between these namespaces. Needs root (ip netns, tc).
#
#   cluster.sh up N [RATE]      N nodes (default RATE 1gbit, tc's units)
#   cluster.sh down [N]         removes nodes, their veths and the bridge
#   cluster.sh enter HOST CMD   runs CMD (a shell command line) in node
#                               HOST as HOST: MPICH's hydra starts its
#                               proxies with it (HYDRA_LAUNCHER=rsh,
#                               HYDRA_LAUNCHER_EXEC=tools/cluster-enter,
#                               the options rsh would take skipped)
#   cluster.sh run N RATE CMD...
#                               up, CMD in node 0 with hydra pointed at
#                               the nodes, down — also when CMD fails or
#                               is interrupted; exits with CMD's status
#   cluster.sh env              the variables `run` sets (for use by hand),
#                               TRELLIS_MPI_WAIT=yield among them where
#                               the nodes up share cores
#   cluster.sh mount-cgroups    (run inside a node) mounts the host's cgroup
#                               filesystems again: entering a node gives it
#                               a sysfs of its own without them, and slurmd
#                               will not start without them
#
# Nodes are named ${TL_CLUSTER_PREFIX:-tlnode}0..N-1 at 10.77.0.10+i/24.
# Why a command that enters the node and not sshd in each: hydra's rsh
# launcher runs `LAUNCHER_EXEC HOST COMMAND`, which is all a remote start
# is; an sshd per node would add keys and daemons to clean up and test
# nothing of trellis.
# A node is also an IPC namespace and a share of the machine's cores of its
# own (what is entered into it runs under taskset on them): UCX moves MPI's
# bytes inside a node through shared memory and between nodes over TCP
# (UCX_TLS=sm,tcp,self) — UCX 1.13's shared-memory addresses carry the IPC
# namespace, so ranks of two nodes cannot reach each other that way and
# their bytes take the link (without the IPC namespace they bypass it: an
# all-reduce between nodes measured 2.05e9 bytes/s at `1gbit`, with it
# 4.6e7); and a node's ranks see only its cores, so ranks that outnumber
# them yield their core while they wait (core/group_mpi.c), as on a real
# node, instead of spinning on cores another node's ranks compute on.
set -euo pipefail

prefix=${TL_CLUSTER_PREFIX:-tlnode}
bridge=${prefix}br
self=$(readlink -f "$0")

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

node() { echo "${prefix}$1"; }

# The cores each of $1 nodes computes on (a taskset list, a line each):
# the cores `up` may use (its Cpus_allowed_list) dealt out, each node its
# own share, or one core each, taken in turn, where the nodes outnumber
# them. `up` writes them to /run/trellis-cluster/NODE.cpus, which `enter`
# reads (hydra calls `enter` from inside node 0, held to node 0's cores),
# and where nodes share cores, /run/trellis-cluster/PREFIX.shared.
deal_cpus() {
  local n=$1 i k per part a b c
  local -a cpus=() list
  for part in $(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status | tr ',' ' '); do
    a=${part%-*} b=${part#*-}
    for ((c = a; c <= b; c++)); do cpus+=("$c"); done
  done
  [ ${#cpus[@]} -ge 1 ] || cpus=(0)
  per=$((${#cpus[@]} / n))
  for ((i = 0; i < n; i++)); do
    if [ "$per" -lt 1 ]; then
      echo "${cpus[$((i % ${#cpus[@]}))]}"
      continue
    fi
    list=()
    for ((k = i * per; k < (i + 1) * per; k++)); do list+=("${cpus[$k]}"); done
    (IFS=,; echo "${list[*]}")
  done
}

node_cpus() { cat "/run/trellis-cluster/$1.cpus" 2>/dev/null || die "no cores recorded for node '$1' (cluster.sh up first)"; }

hosts_file() {
  local n=$1 i
  printf '127.0.0.1 localhost\n'
  for ((i = 0; i < n; i++)); do printf '10.77.0.%d %s\n' $((10 + i)) "$(node $i)"; done
}

up() {
  local n=${1:?cluster.sh up N [RATE]} rate=${2:-1gbit} i ns
  [ "$n" -ge 1 ] 2>/dev/null || die "up: N must be a positive number of nodes, not '$n'"
  [ "$n" -le 200 ] || die "up: at most 200 nodes ($n asked)"
  [ "$(id -u)" -eq 0 ] || die "up: emulated nodes need root (ip netns, tc)"
  # nodes of this prefix left by a run that was killed (SIGKILL skips the
  # traps that take them down) go first
  if ip link show "$bridge" >/dev/null 2>&1 || ip netns list 2>/dev/null | grep -q "^${prefix}[0-9]"; then
    echo "cluster.sh: removing nodes left by an earlier run ($prefix*)" >&2
    down
  fi
  # a step that fails (a bad RATE, a name taken) leaves nothing half made
  trap down EXIT
  local -a cpus
  mkdir -p /run/trellis-cluster
  mapfile -t cpus < <(deal_cpus "$n")
  # a core in two nodes' lists: the nodes share the machine's cores
  if [ "$(printf '%s\n' "${cpus[@]}" | sort | uniq -d | wc -l)" -gt 0 ]; then
    : >"/run/trellis-cluster/$prefix.shared"
  fi
  ip link add "$bridge" type bridge 2>/dev/null || die "up: cannot create bridge $bridge (exists, or no network namespaces here)"
  ip link set "$bridge" up
  for ((i = 0; i < n; i++)); do
    ns=$(node $i)
    ip netns add "$ns" || die "up: cannot create network namespace $ns"
    ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${prefix}v$i" master "$bridge" up
    ip -n "$ns" addr add "10.77.0.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # the link's rate, each way: into the node (the bridge's end) and out
    tc qdisc add dev "${prefix}v$i" root tbf rate "$rate" burst 512kb latency 100ms
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 100ms
    mkdir -p "/etc/netns/$ns"
    hosts_file "$n" >"/etc/netns/$ns/hosts"
    echo "${cpus[$i]}" >"/run/trellis-cluster/$ns.cpus"
  done
  trap - EXIT
  echo "cluster.sh: $n node(s) up, links at $rate: $(node 0)..$(node $((n - 1)))" >&2
}

down() {
  local i ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${prefix}[0-9]*$" || true); do
    # every process still in the node goes with it
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns" "/run/trellis-cluster/$ns.cpus"
  done
  for i in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^${prefix}v[0-9]*$" || true); do
    ip link del "$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -f "/run/trellis-cluster/$prefix.shared"
}

enter() {
  # rsh's own options first (hydra passes none today; -l USER, -n alike)
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
    case "$1" in -l) shift 2 ;; *) shift ;; esac
  done
  local host=${1:?cluster.sh enter HOST COMMAND}
  shift
  ip netns list | awk '{print $1}' | grep -qx "$host" || die "enter: no node '$host' (cluster.sh up first)"
  exec ip netns exec "$host" taskset -c "$(node_cpus "$host")" \
    unshare --uts --ipc sh -c "hostname $host && $*"
}

mount_cgroups() {
  # as the host (PID 1) has them, in its order: a tmpfs, then each hierarchy
  local src dir type opts
  awk '$2 ~ "^/sys/fs/cgroup" { print $1, $2, $3, $4 }' /proc/1/mounts |
    while read -r src dir type opts; do
      mkdir -p "$dir" 2>/dev/null || true
      mount -t "$type" -o "$opts" "$src" "$dir" || die "mount-cgroups: cannot mount $type at $dir"
    done
}

env_vars() {
  local vars="HYDRA_LAUNCHER=rsh HYDRA_LAUNCHER_EXEC=$(dirname "$self")/cluster-enter UCX_TLS=sm,tcp,self"
  # nodes that share cores (more nodes than cores at `up`), which no node
  # can see from its own share: their ranks yield while they wait
  # (core/group_mpi.c) rather than spin on a core another node's rank
  # computes on
  if [ -e "/run/trellis-cluster/$prefix.shared" ]; then vars="$vars TRELLIS_MPI_WAIT=yield"; fi
  echo "$vars"
}

run() {
  local n=${1:?cluster.sh run N RATE COMMAND...} rate=${2:?cluster.sh run N RATE COMMAND...}
  shift 2
  [ $# -gt 0 ] || die "run: no command"
  up "$n" "$rate"
  trap down EXIT
  # a signal ends the command and everything in the nodes (down), then us
  trap 'down; exit 143' TERM
  trap 'down; exit 130' INT
  local status=0
  # in the background and waited for: bash runs a trap only between
  # commands, and `wait` is one a signal interrupts
  # shellcheck disable=SC2046
  ip netns exec "$(node 0)" taskset -c "$(node_cpus "$(node 0)")" \
    unshare --uts --ipc sh -c "hostname $(node 0) && exec \"\$@\"" sh \
    env $(env_vars) "$@" &
  wait $! || status=$?
  return $status
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) shift; down ;;
  enter) shift; enter "$@" ;;
  run) shift; run "$@" ;;
  env) env_vars ;;
  mount-cgroups) mount_cgroups ;;
  *)
    sed -n '2,28p' "$self" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
