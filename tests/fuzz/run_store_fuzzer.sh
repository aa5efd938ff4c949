#!/usr/bin/env bash
# Fuzzes the store's frame parser (rendezvous/store_protocol.cc) with libFuzzer for a bounded
# time: builds tests/fuzz/store_frame_fuzzer.cc with clang++ -fsanitize=fuzzer,address,undefined
# (directly, not through Bazel), seeds a corpus with one valid frame per op, and runs.
#
#   tests/fuzz/run_store_fuzzer.sh [SECONDS]      (default: $FUZZ_SECONDS, else 20)
#
# Installs clang and its libFuzzer runtime with apt-get if they are missing. Prints
# "fuzz: N runs, no crash" and exits 0, or prints the report, keeps the crashing input (its path
# is printed) and exits 1. FUZZ_WORKDIR picks where the build, corpus and artifacts go (default:
# a fresh temporary directory, removed after a clean run).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${1:-${FUZZ_SECONDS:-20}}"
work="${FUZZ_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/braid_store_fuzz.XXXXXX")}"
mkdir -p "$work"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# True if clang++ can link a libFuzzer target with ASan and UBSan.
can_build_fuzzers() {
  command -v clang++ >/dev/null 2>&1 || return 1
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    >"$work/probe.cc"
  clang++ -fsanitize=fuzzer,address,undefined "$work/probe.cc" -o "$work/probe" >/dev/null 2>&1
}

if ! can_build_fuzzers; then
  echo "fuzz: installing clang and its libFuzzer runtime" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq >/dev/null
  command -v clang++ >/dev/null 2>&1 || as_root apt-get install -y -qq clang >/dev/null
  major="$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)"
  as_root apt-get install -y -qq "libclang-rt-${major}-dev" >/dev/null
  can_build_fuzzers || { echo "fuzz: clang++ still cannot build a libFuzzer target" >&2; exit 1; }
fi

srcs=(rendezvous/store_protocol.cc core/base/status.cc)
echo "fuzz: building in $work" >&2
clang++ -std=c++17 -g -O1 -fno-omit-frame-pointer -I. \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  tests/fuzz/store_frame_fuzzer.cc "${srcs[@]}" -o "$work/store_frame_fuzzer"
clang++ -std=c++17 -O1 -I. tests/fuzz/store_frame_seeds.cc "${srcs[@]}" -o "$work/store_frame_seeds"

mkdir -p "$work/corpus"
"$work/store_frame_seeds" "$work/corpus"

set +e
"$work/store_frame_fuzzer" "$work/corpus" \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$work/" -print_final_stats=1 >"$work/fuzz.log" 2>&1
rc=$?
set -e

runs="$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$work/fuzz.log" | tail -1)"
if [ "$rc" -ne 0 ] || [ -z "$runs" ]; then
  tail -n 60 "$work/fuzz.log"
  echo "fuzz: CRASH (exit $rc); log $work/fuzz.log, input(s):" $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null)
  exit 1
fi
# A temporary directory is removed after a clean run; FUZZ_WORKDIR is kept (its corpus grows).
[ -n "${FUZZ_WORKDIR:-}" ] || rm -rf "$work"
echo "fuzz: $runs runs, no crash"
