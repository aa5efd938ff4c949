#!/usr/bin/env bash
# docs/SCALING.md's cost model against the namespace hosts: measures the model's parameters on
# the harness (netns_hosts.sh), then allreduce at every shape it runs here, each algorithm forced,
# small and large, and prints the model beside the measurement; then the model's tables from 8 to
# 4096 ranks with those parameters.
#
#   scaling_check.sh [--rate 1gbit] [--shapes 2x1,2x2,4x1,2x4,4x2] [--large 16M]
#                    [--algos ring,tree,rd,rhd,hier] [--reduce MBps] [--out DIR]
#
# Parameters (scaling_model.py's names), each from sendrecv_perf (every rank sends to the next and
# receives from the previous, at once), out-of-place time per call, the least of three runs:
#   alpha_net, link   2 hosts x 1 rank over tcp through the shaped bridge: 8 B, and --large
#   alpha_shm, shm    1 host x 2 ranks over shared memory: 8 B, and --large
#   reduce            --reduce (MB/s), else the built-in 5000 (the reduction never bounds a
#                     shaped link: 16 MiB reduce in ~3 ms against ~270 ms on the wire at 1 Gbit/s)
#   fan_out           tcp.fan_out_us from bench/calibrate --across-hosts (below)
# Check points: all_reduce_perf (float sum, its data check on) with BRAID_ALGO=allreduce:<algo>,
# and once with the selector's own choice ("auto", read from BRAID_DEBUG=INFO's COLL lines), its
# cost model given a calibration file (BRAID_CALIBRATION): shm from the parameters above, tcp
# from bench/calibrate --across-hosts between hosts 0 and 1.
# An algorithm this build does not have is reported as such, not timed.
#
# Root only (network namespaces). No delay emulation (this kernel has no netem): alpha_net is the
# bridge's and the kernel's per-message cost, not a real network's. Every host shares this
# machine's 2 cores: at 8 ranks the ranks take turns, which the model does not price.
set -uo pipefail

here="${RUNFILES_DIR:-$0.runfiles}/braid"
[ -d "$here" ] || here="$(cd "$(dirname "$0")/../.." && pwd)"
source "$here/tests/multihost/netns_hosts.sh"
braidrun="$here/rendezvous/braidrun"
allreduce="$here/bench/all_reduce_perf"
sendrecv="$here/bench/sendrecv_perf"
calibrate="$here/bench/calibrate"
model="$here/tests/multihost/scaling_model.py"

rate=1gbit
shapes=2x1,2x2,4x1,2x4,4x2
large=16M
algos=ring,tree,rd,rhd,hier
reduce=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --large) large=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --reduce) reduce=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "scaling_check.sh: unknown argument '$1' (see the head of the script)" >&2; exit 2 ;;
  esac
done
for f in "$braidrun" "$allreduce" "$sendrecv" "$calibrate" "$model"; do
  [ -e "$f" ] || { echo "scaling_check.sh: $f is missing (bazel build //tests/multihost:scaling_check)" >&2; exit 1; }
done
large_bytes=$(numfmt --from=iec "$large" 2>/dev/null) || { echo "scaling_check.sh: cannot read --large '$large'" >&2; exit 2; }
max_hosts=2
for shape in ${shapes//,/ }; do
  if ! [[ "$shape" =~ ^([0-9]+)x([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 1 ] ||
     [ "${BASH_REMATCH[2]}" -lt 1 ] || [ $((BASH_REMATCH[1] * BASH_REMATCH[2])) -lt 2 ]; then
    echo "scaling_check.sh: shape '$shape' is not HOSTSxRANKS with 2 ranks or more (e.g. 2x4)" >&2
    exit 2
  fi
  [ "${BASH_REMATCH[1]}" -gt "$max_hosts" ] && max_hosts=${BASH_REMATCH[1]}
done

[ -n "$out" ] || out="$(mktemp -d /tmp/scaling_check.XXXXXX)"
mkdir -p "$out"
mh_init || exit 1
trap mh_teardown EXIT
trap 'exit 130' INT TERM
mh_make_hosts "$max_hosts" "$rate" || exit 1
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before; logs in $out"

port=29700
# job HOSTS PER_HOST LOG ENV... -- PROGRAM ARGS...: one job across hosts 0..HOSTS-1 on the next
# port (mh_job); rank 0's output (the table) goes to LOG, the others' to LOG.nodeK. Returns
# non-zero if a node failed.
job() {
  local hosts=$1 per_host=$2 log=$3
  shift 3
  port=$((port + 1))
  mh_job "$braidrun" "$hosts" "$per_host" "$port" "$log" BRAID_SECRET=scaling-check "$@"
}

# The out-of-place time (us) of the row for BYTES in LOG, or "failed".
time_of() {
  awk -v b="$2" '$1 == b && NF >= 13 && $6 > 0 { print $6; found = 1; exit }
                 END { if (!found) print "failed" }' "$1"
}

# --- parameters
params="$out/params"
: > "$params"
# The least of three runs' times: on a machine other work also uses, the least is the one the
# others disturbed least.
measure_pair() {  # HOSTS PER_HOST NAME_ALPHA NAME_RATE
  local log="$out/param_$3" run t t_small="" t_large=""
  for run in 1 2 3; do
    job "$1" "$2" "$log.small$run" -- "$sendrecv" -b 8 -e 8 -n 2000 -w 200 -c 1
    job "$1" "$2" "$log.large$run" -- "$sendrecv" -b "$large_bytes" -e "$large_bytes" -n 5 -w 1 -c 1
    t=$(time_of "$log.small$run" 8)
    [ "$t" != failed ] && { [ -z "$t_small" ] || awk -v a="$t" -v b="$t_small" 'BEGIN { exit !(a < b) }'; } && t_small=$t
    t=$(time_of "$log.large$run" "$large_bytes")
    [ "$t" != failed ] && { [ -z "$t_large" ] || awk -v a="$t" -v b="$t_large" 'BEGIN { exit !(a < b) }'; } && t_large=$t
  done
  if [ -z "$t_small" ] || [ -z "$t_large" ]; then
    echo "scaling_check.sh: sendrecv_perf failed measuring $3 (logs: $log.*)" >&2
    return 1
  fi
  echo "$3 $t_small" >> "$params"
  awk -v s="$large_bytes" -v t="$t_large" -v a="$t_small" -v name="$4" \
    'BEGIN { printf "%s %.3f\n", name, s / (t - a) }' >> "$params"
}
measure_pair 2 1 alpha_net link || exit 1
measure_pair 1 2 alpha_shm shm || exit 1
[ -n "$reduce" ] && echo "reduce $reduce" >> "$params"
echo "parameters (us; MB/s):"
sed 's/^/  /' "$params"
# A calibration file (docs/ALGORITHMS.md, "Calibration file"), so that the selector's own cost
# functions price the links as measured here: shm's numbers from the parameters above, tcp's from
# bench/calibrate --across-hosts over the shaped link (2 hosts x 2 ranks: its step, rate and
# fan-out price; it keeps the shm lines). The built-in tcp entry is loopback's (1 GB/s), eight
# times a 1 Gbit/s link.
calibration="$out/calibration"
awk '{ v[$1] = $2 } END {
  print "version = 1"
  printf "shm.latency_us_core_per_rank = %.3f\n", v["alpha_shm"]
  printf "shm.bandwidth_gbps = %.4f\n", v["shm"] / 1000
}' "$params" > "$calibration"
if ! job 2 2 "$out/calibrate" -- "$calibrate" --across-hosts --write "$calibration"; then
  echo "scaling_check.sh: calibrate --across-hosts failed (logs: $out/calibrate*)" >&2
  exit 1
fi
echo "calibration (BRAID_CALIBRATION for the selector's runs):"
grep -v '^#' "$calibration" | grep . | sed 's/^/  /'
# The model's price of a message to another host in flight at once (direct), as measured there.
sed -nE 's/^tcp\.fan_out_us = ([0-9.e+-]+).*/fan_out \1/p' "$calibration" >> "$params"

# --- check points
measured="$out/measured"
echo "# hosts per_host algorithm bytes us" > "$measured"
choices="$out/choices"
: > "$choices"
for shape in ${shapes//,/ }; do
  hosts=${shape%x*}
  per_host=${shape#*x}
  for algo in ${algos//,/ } auto; do
    for size in 8 "$large_bytes"; do
      log="$out/${shape}_${algo}_${size}"
      iters=(-n 200 -w 20)
      [ "$size" = 8 ] || iters=(-n 3 -w 1)
      envs=(BRAID_ALGO="allreduce:$algo")
      [ "$algo" = auto ] && envs=(BRAID_CALIBRATION="$calibration" BRAID_DEBUG=INFO
                                  BRAID_DEBUG_SUBSYS=COLL BRAID_DEBUG_FILE="$log.braid.%p")
      if ! job "$hosts" "$per_host" "$log" "${envs[@]}" -- "$allreduce" -b "$size" -e "$size" \
           "${iters[@]}" -c 1; then
        if grep -q "unknown algorithm" "$log"* 2>/dev/null; then
          echo "  $shape $algo: this build has no allreduce algorithm '$algo'"
          continue 2
        fi
      fi
      t=$(time_of "$log" "$size")
      if [ "$algo" = auto ]; then
        picked=$(cat "$log".braid.* 2>/dev/null | sed -nE 's/.*allreduce #.* on [0-9]+ ranks: algorithm ([a-z0-9_]+).*/\1/p' | sort | uniq -c | sort -rn | head -1 | awk '{print $2}')
        echo "$hosts $per_host ${picked:-unknown} $size $t" >> "$choices"
      else
        echo "$hosts $per_host $algo $size $t" >> "$measured"
      fi
    done
  done
done

echo
echo "model against the harness (rate $rate; allreduce float sum, out of place, us per call):"
python3 "$model" check --params "$params" --measured "$measured"
echo
echo "the selector's choice on the harness (auto), with its measured time:"
echo "| hosts x ranks | bytes | selector picked | measured | model's fastest |"
echo "| --- | --- | --- | --- | --- |"
while read -r h p picked size t; do
  fastest=$(cd "$(dirname "$model")" && python3 -c "
import scaling_model as m, sys
p = m.read_params('$params')
print(m.best(p, $h, $p, $size)[0])")
  echo "| $h x $p | $size | $picked | $t us | $fastest |"
done < "$choices"
echo
python3 "$model" table --params "$params" --per-host 8
echo
echo "machine: load average $(cut -d' ' -f1-3 /proc/loadavg) after"
