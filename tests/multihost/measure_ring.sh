#!/usr/bin/env bash
# The flat ring allreduce across namespace hosts whose links are rate-limited, against the bound
# every allreduce obeys there: S bytes over H hosts must move at least 2(H-1)/H * S through some
# host's link, so with links of rate L, algbw <= L * H / (2 (H-1)). A flat ring of n ranks has a
# lower bound of its own, L * n / (2 (n-1)): each of its n-1 reduce-scatter and n-1 all-gather
# steps sends S/n over every edge, and at least one edge crosses each host's link.
#
#   measure_ring.sh [--rate 1gbit] [--shapes 2x4,4x2] [--sizes 16M:64M] [--iters 5]
#
# Root only (network namespaces). Prints, per shape and size, what all_reduce_perf measured
# (out of place and in place, its data check included) beside both bounds. No delay emulation:
# this kernel has no netem, so links have the bridge's sub-millisecond latency.
set -uo pipefail

here="${RUNFILES_DIR:-$0.runfiles}/braid"
[ -d "$here" ] || here="$(cd "$(dirname "$0")/../.." && pwd)"
source "$here/tests/multihost/netns_hosts.sh"
braidrun="$here/rendezvous/braidrun"
perf="$here/bench/all_reduce_perf"

rate=1gbit
shapes=2x4,4x2
sizes=16M:64M
iters=5
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "measure_ring.sh: unknown argument '$1' (see the head of the script)" >&2; exit 2 ;;
  esac
done

link=$(mh_rate_bytes "$rate") || { echo "measure_ring.sh: cannot read rate '$rate' (e.g. 1gbit, 500mbit)" >&2; exit 2; }

mh_init || exit 1
trap mh_teardown EXIT
trap 'exit 130' INT TERM
max_hosts=0
for shape in ${shapes//,/ }; do
  if ! [[ "$shape" =~ ^([0-9]+)x([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 2 ] ||
     [ "${BASH_REMATCH[2]}" -lt 1 ]; then
    echo "measure_ring.sh: shape '$shape' is not HOSTSxRANKS with at least 2 hosts (e.g. 2x4)" >&2
    exit 2
  fi
  h=${BASH_REMATCH[1]}
  [ "$h" -gt "$max_hosts" ] && max_hosts=$h
done
mh_make_hosts "$max_hosts" "$rate" || exit 1
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before the runs"

port=29600
status=0
for shape in ${shapes//,/ }; do
  hosts=${shape%x*}
  per_host=${shape#*x}
  n=$((hosts * per_host))
  port=$((port + 1))
  out="$(mktemp -d)"
  pids=()
  for ((h = 0; h < hosts; h++)); do
    mh_exec "$h" env BRAID_SECRET=measure-ring BRAID_ALGO=allreduce:ring \
      timeout 600 "$braidrun" --no-prefix -n "$per_host" --nnodes "$hosts" --node-rank "$h" \
      --master-addr "$(mh_addr 0)" --master-port "$port" -- \
      "$perf" -b "${sizes%:*}" -e "${sizes#*:}" -f 2 -n "$iters" -w 1 -c 1 > "$out/node$h" 2>&1 &
    pids+=($!)
  done
  for ((h = 0; h < hosts; h++)); do
    wait "${pids[$h]}" || { echo "shape $shape: host $h's braidrun failed:"; cat "$out/node$h"; status=1; }
  done
  bound=$(awk -v l="$link" -v h="$hosts" 'BEGIN { print l * h / (2 * (h - 1)) / 1e6 }')
  ring=$(awk -v l="$link" -v n="$n" 'BEGIN { print l * n / (2 * (n - 1)) / 1e6 }')
  printf '%s hosts x %s ranks, links %s: bound L*H/(2(H-1)) = %.1f MB/s, flat ring bound L*n/(2(n-1)) = %.1f MB/s\n' \
    "$hosts" "$per_host" "$rate" "$bound" "$ring"
  printf '  %12s %14s %14s %9s %8s %8s\n' "bytes" "algbw MB/s" "in-place MB/s" "of bound" "of ring" "#wrong"
  # nccl-tests rows: size count type redop root time algbw busbw #wrong time algbw busbw #wrong;
  # algbw from the times (us), since the table rounds GB/s to two decimals (10 MB/s steps).
  awk -v bound="$bound" -v ring="$ring" '$1 ~ /^[0-9]+$/ && NF >= 13 && $6 > 0 && $10 > 0 {
      printf "  %12d %14.1f %14.1f %8.0f%% %7.0f%% %8s\n", $1, $1 / $6, $1 / $10,
             $1 / $6 / bound * 100, $1 / $6 / ring * 100, $9 "/" $13
    }' "$out/node0"
  grep -E "Out of bounds|Avg bus" "$out/node0" | sed 's/^/  /'
  rm -rf "$out"
done
echo "machine: load average $(cut -d' ' -f1-3 /proc/loadavg) after the runs"
exit $status
