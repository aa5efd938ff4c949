#!/usr/bin/env bash
# Runs every *_perf program at the given rank counts and summarizes #wrong per program.
#   bench/run_all_perf.sh [-n "2 4"] [-o outdir] [-- extra perf flags]
# Defaults: 2 and 4 ranks, -b 8 -e 1M -f 4 -d all (-o all for reductions), one JSON report per
# run under outdir (default /tmp/braid_perf). Uses the binaries from `bazel build`; set BIN to
# use another bazel-bin. Exit status: 0 when every run passed with #wrong 0.
set -uo pipefail
cd "$(dirname "$0")/.."
ranks="2 4"
out=/tmp/braid_perf
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) ranks="$2"; shift 2 ;;
    -o) out="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [-n \"2 4\"] [-o outdir] [-- perf flags]" >&2; exit 2 ;;
  esac
done
extra=("$@")
[[ ${#extra[@]} -eq 0 ]] && extra=(-b 8 -e 1M -f 4 -d all)
bin=${BIN:-$(bazel info bazel-bin 2>/dev/null)}
mkdir -p "$out"
programs="all_reduce_perf all_gather_perf broadcast_perf reduce_perf reduce_scatter_perf
          alltoall_perf gather_perf scatter_perf sendrecv_perf"
status=0
for n in $ranks; do
  for p in $programs; do
    flags=("${extra[@]}")
    case $p in all_reduce_perf|reduce_perf|reduce_scatter_perf) flags+=(-o all) ;; esac
    case $p in broadcast_perf|reduce_perf|gather_perf|scatter_perf) flags+=(-r $((n - 1))) ;; esac
    log="$out/${p}_n$n.log"
    rm -f "$out/${p}_n$n.json"*
    timeout 600 "$bin/rendezvous/braidrun" -n "$n" -- "$bin/bench/$p" "${flags[@]}" \
      -J "$out/${p}_n$n.json" >"$log" 2>&1
    rc=$?
    rows=$(grep -cE '^\[0\] +[0-9]+ ' "$log")
    wrong=$(awk '/^\[0\] +[0-9]+ /{w += $10 + $14} END {print w + 0}' "$log")
    printf '%-20s n=%d rc=%d rows=%-4s #wrong=%s\n' "$p" "$n" "$rc" "$rows" "$wrong"
    if [[ $rc -ne 0 ]]; then
      status=1
      grep -v '^\[0\] ' "$log" | grep -m 3 -iE 'fail|error' | sed 's/^/    /'
    fi
  done
done
exit $status
