#!/usr/bin/env bash
# bench/calibrate --across-hosts on namespace hosts whose links are shaped, and the selector's
# picks under the file it writes (docs/MULTIHOST.md, "Calibrating the link between hosts"):
#   - on one host it refuses, saying there is no link between hosts to measure;
#   - across 2 hosts x 2 ranks, links shaped to 1 Gbit/s (tc tbf), it writes tcp's entry, keeps
#     the file's other entries, and the bandwidth it measured is within a sane factor of the
#     shaped rate;
#   - with that file, BRAID_DEBUG=INFO's COLL lines show the default selector running a 4 MiB
#     allreduce by "hier" at 2 x 2, where the built-in calibration (loopback's tcp) picks a flat
#     algorithm, and a flat algorithm for the same call on one host of 4 ranks.
# Needs root; without it (or without `ip netns`) it fails saying so: a skip would read as a pass.
set -uo pipefail

here="${TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/braid"
[ -d "$here" ] || here="$(cd "$(dirname "$0")/../.." && pwd)"
source "$here/tests/multihost/netns_hosts.sh"
braidrun="$here/rendezvous/braidrun"
calibrate="$here/bench/calibrate"
allreduce="$here/bench/all_reduce_perf"
work="${TEST_TMPDIR:-$(mktemp -d)}/calibrate_across"
mkdir -p "$work"
rate=1gbit

mh_init || exit 1
trap mh_teardown EXIT
trap 'exit 130' INT TERM
mh_make_hosts 2 "$rate" || exit 1

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

port=29530
# job HOSTS PER_HOST LOG ENV... -- PROGRAM ARGS...: one job on the next port (mh_job); node 0's
# output in LOG, node K's in LOG.nodeK; non-zero if any node's braidrun failed.
job() {
  local hosts=$1 per_host=$2 log=$3
  shift 3
  port=$((port + 1))
  mh_job "$braidrun" "$hosts" "$per_host" "$port" "$log" BRAID_SECRET=calibrate-across \
    BRAID_TIMEOUT_MS=120000 "$@"
}

# The algorithm BRAID_DEBUG=INFO's COLL lines (files LOGS...) name for allreduce calls of COUNT
# floats, if every such line names the same one; else "mixed: ..." or "none".
picked() {
  local count=$1
  shift
  local names
  names=$(cat "$@" 2>/dev/null | sed -nE "s/.*allreduce #[0-9]+ count $count float .*: algorithm ([a-z0-9_]+).*/\1/p" | sort -u)
  if [ -z "$names" ]; then
    echo none
  elif [ "$(echo "$names" | wc -l)" -gt 1 ]; then
    echo "mixed: $(echo $names)"
  else
    echo "$names"
  fi
}

echo "--- one host: refused"
one_host="$work/one_host"
if job 1 2 "$one_host" -- "$calibrate" --across-hosts --write "$work/never"; then
  fail "calibrate --across-hosts on one host succeeded"
fi
grep -q "no link between hosts to measure" "$one_host" ||
  fail "calibrate --across-hosts on one host did not say why: $(head -3 "$one_host")"
[ -e "$work/never" ] && fail "calibrate --across-hosts on one host wrote a file"

echo "--- 2 hosts x 2 ranks, links at $rate: calibrate --across-hosts"
calibration="$work/calibration"
measure="$work/measure"
# A file the one-host calibrate wrote before: its shm entry must survive.
printf 'version = 1\nshm.bandwidth_gbps = 2.5\n' > "$calibration"
job 2 2 "$measure" -- "$calibrate" --across-hosts --write "$calibration" ||
  fail "calibrate --across-hosts exited non-zero: $(cat "$measure"* | tail -5)"
cat "$measure"
value() { sed -nE "s/^$1 = ([0-9.e+-]+).*/\1/p" "$calibration"; }
[ "$(value shm.bandwidth_gbps)" = 2.5 ] ||
  fail "the file's shm.bandwidth_gbps = 2.5 was not kept (now: '$(value shm.bandwidth_gbps)')"
bandwidth=$(value tcp.bandwidth_gbps)
latency=$(value tcp.latency_us)
fan_out=$(value tcp.fan_out_us)
shaped=$(mh_rate_bytes "$rate")
if [ -z "$bandwidth" ] || [ -z "$latency" ] || [ -z "$fan_out" ]; then
  fail "$calibration lacks tcp.bandwidth_gbps, tcp.latency_us or tcp.fan_out_us"
else
  # TCP/IP headers take ~5% of a shaped link; less than half its rate, or more than it, is wrong.
  if ! awk -v b="$bandwidth" -v r="$shaped" 'BEGIN { exit !(b * 1e9 >= 0.5 * r && b * 1e9 <= 1.05 * r) }'; then
    fail "measured tcp.bandwidth_gbps = $bandwidth, the link is shaped to $(awk -v r="$shaped" 'BEGIN { print r / 1e9 }') GB/s"
  fi
  awk -v l="$latency" 'BEGIN { exit !(l > 0) }' || fail "tcp.latency_us = $latency is not positive"
  echo "measured across hosts: tcp.bandwidth_gbps $bandwidth (shaped: $(awk -v r="$shaped" 'BEGIN { print r / 1e9 }')), tcp.latency_us $latency, tcp.fan_out_us $fan_out"
fi

# 4 MiB of floats: large enough that the shaped link decides.
count=1048576
bytes=$((count * 4))
run_allreduce() {  # HOSTS PER_HOST NAME CALIBRATION
  local log="$work/$3"
  job "$1" "$2" "$log" BRAID_CALIBRATION="$4" BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=INIT,COLL \
    BRAID_DEBUG_FILE="$log.braid.%p" -- "$allreduce" -b "$bytes" -e "$bytes" -n 3 -w 1 -c 1 ||
    fail "$3: all_reduce_perf failed: $(cat "$log" "$log".node* 2>/dev/null | tail -5)"
}

echo "--- the selector's picks for a 4 MiB allreduce"
run_allreduce 2 2 across_file "$calibration"
choice=$(picked "$count" "$work"/across_file.braid.*)
echo "2 x 2, calibrated across hosts: $choice ($(grep -h -m1 -o 'two-level algorithms: .*' "$work"/across_file.braid.* | head -1))"
[ "$choice" = hier ] || fail "2 x 2 with the measured calibration picked '$choice', expected hier"

run_allreduce 2 2 across_builtin none
choice=$(picked "$count" "$work"/across_builtin.braid.*)
echo "2 x 2, built-in calibration: $choice"
case "$choice" in
  hier | none | mixed*) fail "2 x 2 with the built-in calibration picked '$choice', expected a flat algorithm" ;;
esac

run_allreduce 1 4 one_host_file "$calibration"
choice=$(picked "$count" "$work"/one_host_file.braid.*)
echo "1 x 4, calibrated across hosts: $choice"
case "$choice" in
  hier | none | mixed*) fail "one host with the measured calibration picked '$choice', expected a flat algorithm" ;;
esac

if [ "$failures" -gt 0 ]; then
  echo "calibrate_across_test: $failures failure(s)"
  exit 1
fi
echo "calibrate_across_test: all checks passed"
