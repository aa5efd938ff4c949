#!/usr/bin/env bash
# Ranks that do not own a core: an 8-byte and a large allreduce of a 2-rank and a 4-rank job on
# this machine, alone and beside one competing busy process (`sh -c 'while :; do :; done'`),
# started by braidrun with each CPU binding and waiting policy, and by Open MPI's mpirun bound
# and unbound, in turns. Prints one table: the out-of-place time per call (us) of each cell, the
# median over --rounds rounds (min-max in brackets).
#
#   bench/contention.sh [--ranks 2,4] [--large 16M] [--rounds 3] [--out DIR]
#
# Binaries: braidrun and all_reduce_perf from BRAID_BIN (default: this checkout's bazel-bin, as
# `bazel info bazel-bin` says), mpi_perf from bench/peers/out (bench/peers/build.sh builds it);
# mpirun from PATH. A variant whose program is missing is printed as "missing", never as a time.
#
# The variants (what a user gets from each launcher):
#   braid auto      braidrun's default binding (rendezvous/cpu_binding.h)
#   braid core      --bind-to core: local rank r on the r-th CPU
#   braid none      --bind-to none: wherever the kernel puts them (as torchrun does)
#   braid none/spin --bind-to none, BRAID_WAIT_POLICY=spin (spin 100 us, yield to 2 ms, sleep)
#   braid none/yield --bind-to none, BRAID_WAIT_POLICY=yield (no spin, yield to 300 us, sleep)
#   mpi core        mpirun --bind-to core (Open MPI's default below 3 ranks; core:overload-allowed
#                   past one rank per CPU, which Open MPI otherwise refuses)
#   mpi none        mpirun --bind-to none
#
# Measurements on a machine that other work also loads are meaningless here: every cell is about
# who gets a core. Run it on an otherwise idle machine; it prints the load average before and
# after so a reader can tell.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
ranks_list=2,4
large=16M
rounds=3
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks_list=$2; shift 2 ;;
    --large) large=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "contention.sh: unknown argument '$1' (see the head of the script)" >&2; exit 2 ;;
  esac
done
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "contention.sh: --rounds '$rounds' is not a positive number" >&2
  exit 2
fi
for n in ${ranks_list//,/ }; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || [ "$n" -lt 2 ]; then
    echo "contention.sh: --ranks entry '$n' is not a rank count of at least 2" >&2
    exit 2
  fi
done

bin="${BRAID_BIN:-}"
if [ -z "$bin" ]; then
  bin="$(cd "$root" && bazel info bazel-bin 2>/dev/null)" || bin="$root/bazel-bin"
fi
braidrun="$bin/rendezvous/braidrun"
perf="$bin/bench/all_reduce_perf"
mpi_perf="$root/bench/peers/out/mpi_perf"
for f in "$braidrun" "$perf"; do
  [ -x "$f" ] || { echo "contention.sh: $f is missing (bazel build //rendezvous:braidrun //bench:all_reduce_perf, or set BRAID_BIN)" >&2; exit 1; }
done
have_mpi=1
if ! command -v mpirun >/dev/null || [ ! -x "$mpi_perf" ]; then
  have_mpi=0
  echo "contention.sh: no mpirun or $mpi_perf (bench/peers/build.sh): Open MPI rows print 'missing'" >&2
fi

[ -n "$out" ] || out="$(mktemp -d /tmp/contention.XXXXXX)"
mkdir -p "$out"
busy_pid=""
cleanup() {
  if [ -n "$busy_pid" ]; then kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null; fi
  busy_pid=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM

variants=("braid auto" "braid core" "braid none" "braid none/spin" "braid none/yield" "mpi core" "mpi none")

# run_variant VARIANT N BYTES ITERS WARMUP LOG: one job; rank 0's table goes to LOG.
run_variant() {
  local variant=$1 n=$2 bytes=$3 iters=$4 warmup=$5 log=$6
  local args=(-b "$bytes" -e "$bytes" -n "$iters" -w "$warmup" -c 0)
  case "$variant" in
    "braid auto") timeout 300 "$braidrun" --no-prefix -n "$n" -- "$perf" "${args[@]}" ;;
    "braid core") timeout 300 "$braidrun" --no-prefix --bind-to core -n "$n" -- "$perf" "${args[@]}" ;;
    "braid none") timeout 300 "$braidrun" --no-prefix --bind-to none -n "$n" -- "$perf" "${args[@]}" ;;
    "braid none/spin")
      BRAID_WAIT_POLICY=spin timeout 300 "$braidrun" --no-prefix --bind-to none -n "$n" -- "$perf" "${args[@]}" ;;
    "braid none/yield")
      BRAID_WAIT_POLICY=yield timeout 300 "$braidrun" --no-prefix --bind-to none -n "$n" -- "$perf" "${args[@]}" ;;
    "mpi core" | "mpi none")
      [ "$have_mpi" = 1 ] || return 3
      # Past one rank per CPU, Open MPI binds to cores only when told overloading is allowed.
      local bind="${variant#mpi }"
      [ "$bind" = core ] && [ "$n" -gt "$(nproc)" ] && bind="core:overload-allowed"
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader \
        --bind-to "$bind" "$mpi_perf" --coll all_reduce "${args[@]}" ;;
  esac > "$log" 2>&1
}

# The out-of-place time (us) of the table row for BYTES in LOG, or "" if there is none.
time_of() {
  awk -v b="$2" '$1 == b && NF >= 13 { print $6; exit }' "$1"
}

# Median and range of the numbers on stdin: "m (lo-hi)", or "failed" if there are none.
summarize() {
  sort -g | awk '{ v[NR] = $1 } END {
      if (NR == 0) { print "failed"; exit }
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%s (%s-%s)", f(m), f(v[1]), f(v[NR])
    }
    function f(x) { return sprintf(x < 100 ? "%.2f" : "%.0f", x) }'
}

bytes_large=$(numfmt --from=iec "$large" 2>/dev/null) || { echo "contention.sh: cannot read --large '$large'" >&2; exit 2; }
echo "machine: $(nproc) CPUs online, load average $(cut -d' ' -f1-3 /proc/loadavg) before; logs in $out"
for round in $(seq "$rounds"); do
  for n in ${ranks_list//,/ }; do
    for busy in alone busy; do
      if [ "$busy" = busy ]; then
        sh -c 'while :; do :; done' &
        busy_pid=$!
      fi
      for variant in "${variants[@]}"; do
        tag="${variant// /_}"
        tag="${tag//\//_}"
        run_variant "$variant" "$n" 8 2000 200 "$out/r${round}_n${n}_${busy}_${tag}_small.log"
        run_variant "$variant" "$n" "$bytes_large" 5 1 "$out/r${round}_n${n}_${busy}_${tag}_large.log"
      done
      cleanup
    done
  done
done

printf '\n%-17s %-6s %-6s %24s %24s\n' "launcher" "ranks" "beside" "8 B: us per call" "$large: us per call"
for n in ${ranks_list//,/ }; do
  for busy in alone busy; do
    for variant in "${variants[@]}"; do
      tag="${variant// /_}"
      tag="${tag//\//_}"
      cells=()
      for size in small large; do
        bytes=8
        [ "$size" = large ] && bytes=$bytes_large
        if [ "${variant%% *}" = mpi ] && [ "$have_mpi" = 0 ]; then
          cells+=("missing")
          continue
        fi
        cells+=("$(for round in $(seq "$rounds"); do
                     time_of "$out/r${round}_n${n}_${busy}_${tag}_${size}.log" "$bytes"
                   done | summarize)")
      done
      printf '%-17s %-6s %-6s %24s %24s\n' "$variant" "$n" "$([ "$busy" = busy ] && echo "1 busy" || echo "-")" "${cells[0]}" "${cells[1]}"
    done
  done
done
echo "machine: load average $(cut -d' ' -f1-3 /proc/loadavg) after"
