#!/usr/bin/env bash
# Allreduce across namespace hosts whose links are rate-limited: braid's two-level allreduce
# ("hier"), braid's flat ring, Open MPI and Gloo, side by side, against the bound every allreduce
# obeys there: S bytes over H hosts must move at least 2(H-1)/H * S through some host's link, so
# with links of rate L, algbw <= L * H / (2 (H-1)) (docs/MULTIHOST.md).
#
#   measure_hier.sh [--rate 1gbit] [--shapes 2x4,4x2] [--sizes 16M:64M] [--iters 5]
#                   [--runs hier,model,ring,mpi,gloo,mpihan]
#
# Root only (network namespaces). Every run gets the same hosts, ranks placed host by host:
#   hier, ring  bench/all_reduce_perf through braidrun in each host, BRAID_ALGO=allreduce:<algo>
#               (shared memory inside a host, TCP across);
#   model       the same with the cost model's choice, its tcp calibrated across the hosts
#               (bench/calibrate --across-hosts writes the BRAID_CALIBRATION file);
#   mpi         bench/peers/out/mpi_perf by mpirun inside host 0, whose remote agent
#               (mpi_netns_agent.sh) starts orted inside the other hosts' namespaces, each host
#               with a host name of its own (a UTS namespace named after its network one); btl
#               self,vader,tcp (shared memory inside a host), unbound (--bind-to none: 8 ranks on
#               2 CPUs), Open MPI's own allreduce choice (coll tuned, flat);
#   mpihan      the same with Open MPI's hierarchical collectives (coll han, priority 100): its
#               two-level allreduce, the fair peer of braid's. Not in the default runs: with
#               Open MPI 4.1.4 (Debian 12) every rank dies of SIGSEGV in its first allreduce
#               (ompi_coll_base_reduce_intra_binomial under mca_coll_han_allreduce_intra);
#   gloo        bench/peers/out/gloo_perf, one process per rank in its host's namespace, a
#               FileStore in a fresh directory, ring allreduce over TCP (Gloo has no shared
#               memory transport: ranks of one host talk over TCP inside the namespace).
# The peers' binaries come from bench/peers/build.sh; a run whose binary is missing says so.
# Prints algbw (MB/s = 10^6 bytes/s, from the measured times, out of place and in place), its
# share of the bound, each run's #wrong, and (on its first row) the packets the links' rate
# limiters dropped during the run. No delay emulation: this kernel has no netem.
set -uo pipefail

here="${RUNFILES_DIR:-$0.runfiles}/braid"
[ -d "$here" ] || here="$(cd "$(dirname "$0")/../.." && pwd)"
source "$here/tests/multihost/netns_hosts.sh"
braidrun="$here/rendezvous/braidrun"
perf="$here/bench/all_reduce_perf"
# The peers are built outside Bazel (bench/peers/build.sh) into the source tree.
src="${BRAID_SOURCE_DIR:-$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)}"
peers="${PEERS_OUT:-$src/bench/peers/out}"
agent="$src/tests/multihost/mpi_netns_agent.sh"

rate=1gbit
shapes=2x4,4x2
sizes=16M:64M
iters=5
runs=hier,model,ring,mpi,gloo
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    *) echo "measure_hier.sh: unknown argument '$1' (see the head of the script)" >&2; exit 2 ;;
  esac
done

link=$(mh_rate_bytes "$rate") || { echo "measure_hier.sh: cannot read rate '$rate' (e.g. 1gbit, 500mbit)" >&2; exit 2; }

mh_init || exit 1
trap mh_teardown EXIT
trap 'exit 130' INT TERM
max_hosts=0
for shape in ${shapes//,/ }; do
  if ! [[ "$shape" =~ ^([0-9]+)x([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 2 ] ||
     [ "${BASH_REMATCH[2]}" -lt 1 ]; then
    echo "measure_hier.sh: shape '$shape' is not HOSTSxRANKS with at least 2 hosts (e.g. 2x4)" >&2
    exit 2
  fi
  [ "${BASH_REMATCH[1]}" -gt "$max_hosts" ] && max_hosts=${BASH_REMATCH[1]}
done
mh_make_hosts "$max_hosts" "$rate" || exit 1
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before the runs"

perf_args=(-b "${sizes%:*}" -e "${sizes#*:}" -f 2 -n "$iters" -w 1 -c 1)
port=29700
status=0
# These hosts' tcp, measured by bench/calibrate --across-hosts between hosts 0 and 1 (2 ranks
# each): the shaped link's step, payload rate and fan-out price, shm built in. Every braid run
# prices with it; it matters only to "model", the cost model's own choice.
calibration=$(mktemp -u)
if ! mh_job "$braidrun" 2 2 "$port" "$calibration.log" BRAID_SECRET=measure-hier -- \
     "$here/bench/calibrate" --across-hosts --write "$calibration"; then
  echo "measure_hier.sh: calibrate --across-hosts failed: $(tail -3 "$calibration".log*)" >&2
  exit 1
fi
echo "calibration (tcp across hosts, for 'model'): $(grep -E '^tcp\.' "$calibration" | cut -d'#' -f1 | tr -s ' \n' ' ')"
rm -f "$calibration".log*

# One run of `what` on hosts x per_host; its rank 0's table into $1.
run_braid() {  # out algo hosts per_host ("" = the cost model's choice)
  local out=$1 algo=$2 hosts=$3 per_host=$4 h pids=()
  port=$((port + 1))
  for ((h = 0; h < hosts; h++)); do
    mh_exec "$h" env BRAID_SECRET=measure-hier BRAID_ALGO="${algo:+allreduce:$algo}" \
      BRAID_CALIBRATION="$calibration" \
      timeout 600 "$braidrun" --no-prefix -n "$per_host" --nnodes "$hosts" --node-rank "$h" \
      --master-addr "$(mh_addr 0)" --master-port "$port" -- \
      "$perf" "${perf_args[@]}" > "$out.node$h" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for ((h = 0; h < hosts; h++)); do wait "${pids[$h]}" || failed=1; done
  cp "$out.node0" "$out"
  if [ "$failed" -ne 0 ]; then for ((h = 0; h < hosts; h++)); do cat "$out.node$h"; done; return 1; fi
}

run_mpi() {  # out hosts per_host [mpirun options...]
  local out=$1 hosts=$2 per_host=$3 h map="" hostfile="$1.hosts"
  shift 3
  [ -x "$peers/mpi_perf" ] || { echo "no $peers/mpi_perf (bench/peers/build.sh builds it)" > "$out"; return 1; }
  : > "$hostfile"
  for ((h = 0; h < hosts; h++)); do
    echo "$(mh_addr "$h") slots=$per_host" >> "$hostfile"
    map+="$(mh_addr "$h")=$(mh_netns "$h") "
  done
  # Every host gets a host name of its own (a UTS namespace), as real hosts have: Open MPI tells
  # nodes apart by name, and with one name for all it takes every rank for one node's.
  mh_exec 0 unshare --uts env MH_NETNS_OF="$map" MH_HOSTNAME="$(mh_netns 0)" \
    bash -c 'hostname "$MH_HOSTNAME" && exec "$@"' mpirun-in-host-0 \
    timeout 600 mpirun --allow-run-as-root --oversubscribe \
    --bind-to none -np $((hosts * per_host)) --hostfile "$hostfile" \
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "$@" \
    "$peers/mpi_perf" --coll all_reduce "${perf_args[@]}" > "$out" 2>&1
}

run_gloo() {  # out hosts per_host
  local out=$1 hosts=$2 per_host=$3 h l r pids=() store
  [ -x "$peers/gloo_perf" ] || { echo "no $peers/gloo_perf (bench/peers/build.sh builds it)" > "$out"; return 1; }
  store=$(mktemp -d)
  rmdir "$store"
  for ((h = 0; h < hosts; h++)); do
    for ((l = 0; l < per_host; l++)); do
      r=$((h * per_host + l))
      mh_exec "$h" env RANK=$r WORLD_SIZE=$((hosts * per_host)) GLOO_STORE_DIR="$store" \
        GLOO_HOSTNAME="$(mh_addr "$h")" timeout 600 "$peers/gloo_perf" --coll all_reduce \
        "${perf_args[@]}" > "$out.rank$r" 2>&1 &
      pids+=($!)
    done
  done
  local failed=0 p
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  cp "$out.rank0" "$out"
  rm -rf "$store"
  if [ "$failed" -ne 0 ]; then cat "$out".rank*; return 1; fi
}

# Packets the hosts' rate limiters (tbf, both directions) dropped so far, summed: a drop costs
# the TCP stream a retransmission, at worst a 200 ms timeout.
drops() {
  local h total=0 n
  for ((h = 0; h < max_hosts; h++)); do
    for n in $(mh_exec "$h" tc -s qdisc show dev eth0 | sed -nE 's/.*dropped ([0-9]+).*/\1/p') \
             $(tc -s qdisc show dev "${MH_PREFIX}${MH_ID}v$h" | sed -nE 's/.*dropped ([0-9]+).*/\1/p'); do
      total=$((total + n))
    done
  done
  echo "$total"
}

for shape in ${shapes//,/ }; do
  hosts=${shape%x*}
  per_host=${shape#*x}
  bound=$(awk -v l="$link" -v h="$hosts" 'BEGIN { print l * h / (2 * (h - 1)) / 1e6 }')
  printf '%s hosts x %s ranks, links %s: bound L*H/(2(H-1)) = %.1f MB/s\n' "$hosts" "$per_host" "$rate" "$bound"
  printf '  %-6s %12s %14s %14s %9s %8s %8s\n' "run" "bytes" "algbw MB/s" "in-place MB/s" "of bound" "#wrong" "drops"
  for what in ${runs//,/ }; do
    out="$(mktemp)"
    dropped_before=$(drops)
    case "$what" in
      hier | ring) run_braid "$out" "$what" "$hosts" "$per_host" ;;
      model) run_braid "$out" "" "$hosts" "$per_host" ;;
      mpi) run_mpi "$out" "$hosts" "$per_host" ;;
      mpihan) run_mpi "$out" "$hosts" "$per_host" --mca coll_han_priority 100 ;;
      gloo) run_gloo "$out" "$hosts" "$per_host" ;;
      *) echo "measure_hier.sh: unknown run '$what' (hier, model, ring, mpi, mpihan, gloo)" >&2; exit 2 ;;
    esac
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "  $what: failed (exit $rc):"; tail -20 "$out" | sed 's/^/    /'; status=1
    fi
    # nccl-tests rows: size count type redop root time algbw busbw #wrong [time algbw busbw #wrong]
    dropped=$(($(drops) - dropped_before))
    awk -v bound="$bound" -v what="$what" -v drops="$dropped" '$1 ~ /^[0-9]+$/ && NF >= 9 && $6 > 0 {
        inplace = (NF >= 13 && $10 > 0) ? sprintf("%14.1f", $1 / $10) : sprintf("%14s", "-")
        wrong = (NF >= 13) ? $9 "/" $13 : $9
        printf "  %-6s %12d %14.1f %s %8.0f%% %8s %8s\n", what, $1, $1 / $6, inplace,
               $1 / $6 / bound * 100, wrong, (shown++ ? "" : drops)
      }' "$out"
    rm -f "$out" "$out".*
  done
done
rm -f "$calibration"
echo "machine: load average $(cut -d' ' -f1-3 /proc/loadavg) after the runs"
exit $status
