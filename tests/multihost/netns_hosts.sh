# Several "hosts" on this machine: one network namespace per host, each with its own address on a
# veth pair whose other end is a port of one bridge, so hosts reach each other only over that
# bridge, through real kernel TCP/IP. Sourced by the multi-host tests and measurements.
#
# What it models: hosts that do not share abstract Unix sockets or loopback (so braid's shared
# memory transport cannot link ranks of different hosts and TCP carries their traffic), each with
# its own network link, optionally rate-limited with tc's token bucket (tbf) in both directions,
# as a full-duplex NIC is. What it does not model: network delay or loss (this kernel has no
# netem, so there is no delay emulation here), separate CPUs or memory (every "host" shares this
# machine's cores, page cache and memory bandwidth), or a switch's own limits (the bridge
# forwards in the kernel at memory speed).
#
# Functions (all return non-zero with a message on stderr when something fails):
#   mh_init               checks for root and `ip netns`, picks this run's names
#   mh_make_hosts N [R]   makes hosts 0..N-1; R (a tc rate such as 1gbit) shapes each host's link
#   mh_addr I             host I's address
#   mh_exec I CMD...      runs CMD inside host I
#   mh_job BRAIDRUN HOSTS PER_HOST PORT LOG ENV... -- PROGRAM ARGS...
#                         one braid job over hosts 0..HOSTS-1, PER_HOST ranks each
#   mh_teardown           ends what runs in the hosts, removes every namespace, link and bridge
#                         this run made (and nothing else); safe to call more than once
#
# Names: BRAID_MULTIHOST_PREFIX (default "bmh", at most 5 characters) followed by 4 hex digits
# chosen per run, so runs side by side (another checkout's tests) never touch each other's.

MH_PREFIX="${BRAID_MULTIHOST_PREFIX:-bmh}"
MH_SUBNET="10.213.0"  # private; only inside this run's namespaces, so runs side by side may share it
MH_ID=""
MH_MADE_NETNS=()
MH_MADE_LINKS=()

mh_fail() {
  echo "multihost: $*" >&2
  return 1
}

mh_init() {
  if [ "$(id -u)" != "0" ]; then
    mh_fail "needs root (network namespaces, veth pairs and tc need CAP_NET_ADMIN); run as root, as CI does"
    return 1
  fi
  command -v ip >/dev/null || { mh_fail "the 'ip' command (iproute2) is missing"; return 1; }
  command -v tc >/dev/null || { mh_fail "the 'tc' command (iproute2) is missing"; return 1; }
  if [ ${#MH_PREFIX} -gt 5 ]; then
    mh_fail "BRAID_MULTIHOST_PREFIX='$MH_PREFIX' is longer than 5 characters (interface names have 15)"
    return 1
  fi
  for _ in 1 2 3 4 5 6 7 8; do
    MH_ID=$(printf '%04x' $(( (RANDOM << 1 ^ $$) & 0xffff )))
    if ! ip netns list 2>/dev/null | grep -q "^${MH_PREFIX}${MH_ID}" &&
       ! ip link show "${MH_PREFIX}${MH_ID}br" >/dev/null 2>&1; then
      break
    fi
    MH_ID=""
  done
  [ -n "$MH_ID" ] || { mh_fail "no free name for this run's namespaces"; return 1; }
  # A throwaway namespace proves `ip netns` works here (a container without the right may lack it).
  local probe="${MH_PREFIX}${MH_ID}probe"
  local why
  if ! why=$(ip netns add "$probe" 2>&1); then
    mh_fail "cannot create network namespaces here ('ip netns add' said: $why)"
    return 1
  fi
  ip netns delete "$probe"
}

mh_netns() { echo "${MH_PREFIX}${MH_ID}h$1"; }
# tc's rate in bytes per second: 1gbit, 500mbit, 100kbit, or plain bit/s (the scripts' bounds).
mh_rate_bytes() {
  local text=${1,,} number unit
  number=$(echo "$text" | sed -nE 's/^([0-9.]+)([a-z]*)$/\1/p')
  unit=$(echo "$text" | sed -nE 's/^([0-9.]+)([a-z]*)$/\2/p')
  [ -n "$number" ] || return 1
  case "$unit" in
    gbit) awk -v n="$number" 'BEGIN { print n * 1e9 / 8 }' ;;
    mbit) awk -v n="$number" 'BEGIN { print n * 1e6 / 8 }' ;;
    kbit) awk -v n="$number" 'BEGIN { print n * 1e3 / 8 }' ;;
    bit | "") awk -v n="$number" 'BEGIN { print n / 8 }' ;;
    *) return 1 ;;
  esac
}

mh_addr() { echo "${MH_SUBNET}.$(( $1 + 1 ))"; }
mh_exec() {
  local host=$1
  shift
  ip netns exec "$(mh_netns "$host")" "$@"
}

# tc's token bucket at `rate` on `dev`, through the command prefix that follows ("ip netns exec NS"
# inside a host, nothing on the bridge's side). The 256 KiB bucket holds a 64 KiB
# segmentation-offload packet (a smaller one would drop them) and 2 ms at 1 Gbit/s; at most 20 ms
# of packets wait in the queue.
mh_shape() {
  local dev=$1 rate=$2
  shift 2
  "$@" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kb latency 20ms
}

mh_make_hosts() {
  local n=$1 rate=${2:-}
  [ -n "$MH_ID" ] || { mh_fail "mh_init first"; return 1; }
  if [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then
    mh_fail "host count $n is outside [1, 200]"
    return 1
  fi
  local bridge="${MH_PREFIX}${MH_ID}br"
  ip link add "$bridge" type bridge || { mh_fail "cannot create bridge $bridge"; return 1; }
  MH_MADE_LINKS+=("$bridge")
  ip link set "$bridge" up || return 1
  local i ns outer
  for ((i = 0; i < n; i++)); do
    ns=$(mh_netns "$i")
    outer="${MH_PREFIX}${MH_ID}v$i"
    ip netns add "$ns" || { mh_fail "cannot create namespace $ns"; return 1; }
    MH_MADE_NETNS+=("$ns")
    ip link add "$outer" type veth peer name "${outer}i" || { mh_fail "cannot create veth $outer"; return 1; }
    MH_MADE_LINKS+=("$outer")
    ip link set "${outer}i" netns "$ns" || return 1
    ip link set "$outer" master "$bridge" up || return 1
    # Inside, the host sees a plain eth0 and its loopback, as a machine would.
    ip netns exec "$ns" ip link set "${outer}i" name eth0 || return 1
    ip netns exec "$ns" ip addr add "$(mh_addr "$i")/24" dev eth0 || return 1
    ip netns exec "$ns" ip link set eth0 up || return 1
    ip netns exec "$ns" ip link set lo up || return 1
    if [ -n "$rate" ]; then
      # Both directions, as a full-duplex NIC: what the host sends (its eth0) and what it receives
      # (the bridge's port towards it).
      mh_shape eth0 "$rate" ip netns exec "$ns" || { mh_fail "tc tbf rate $rate failed on host $i"; return 1; }
      mh_shape "$outer" "$rate" || { mh_fail "tc tbf rate $rate failed on host $i's bridge port"; return 1; }
    fi
  done
  echo "multihost: $n hosts (namespaces $(mh_netns 0)..), addresses $(mh_addr 0)..$(mh_addr $((n - 1)))," \
       "links ${rate:-unshaped}; no delay emulation (this kernel has no netem)"
}

# mh_job BRAIDRUN HOSTS PER_HOST PORT LOG ENV... -- PROGRAM ARGS...: braidrun (path BRAIDRUN) in
# each of hosts 0..HOSTS-1 with PER_HOST ranks, node 0 (which hosts the store on PORT) at host 0's
# address; every rank runs PROGRAM ARGS with the environment variables ENV (NAME=VALUE; every
# node of a job needs the same BRAID_SECRET), for at most 300 s. Node 0's output goes to LOG,
# node K's to LOG.nodeK. Returns non-zero if any node's braidrun did.
mh_job() {
  local braidrun=$1 hosts=$2 per_host=$3 port=$4 log=$5
  shift 5
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ $# -gt 1 ] || { mh_fail "mh_job: no program after '--'"; return 1; }
  shift
  local pids=() h status=0 to
  for ((h = 0; h < hosts; h++)); do
    to="$log"
    [ "$h" -gt 0 ] && to="$log.node$h"
    mh_exec "$h" env "${envs[@]}" timeout 300 "$braidrun" --no-prefix -n "$per_host" \
      --nnodes "$hosts" --node-rank "$h" --master-addr "$(mh_addr 0)" --master-port "$port" \
      -- "$@" > "$to" 2>&1 &
    pids+=($!)
  done
  for ((h = 0; h < hosts; h++)); do wait "${pids[$h]}" || status=1; done
  return $status
}

mh_teardown() {
  local ns pid link busy
  # Only processes inside this run's namespaces: everything there was started by this run.
  for ns in "${MH_MADE_NETNS[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null; done
  done
  for _ in $(seq 20); do
    busy=""
    for ns in "${MH_MADE_NETNS[@]}"; do busy+=$(ip netns pids "$ns" 2>/dev/null); done
    [ -z "$busy" ] && break
    sleep 0.1
  done
  for ns in "${MH_MADE_NETNS[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns delete "$ns" 2>/dev/null
  done
  for link in "${MH_MADE_LINKS[@]}"; do
    ip link delete "$link" 2>/dev/null
  done
  MH_MADE_NETNS=()
  MH_MADE_LINKS=()
}
