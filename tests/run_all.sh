#!/usr/bin/env bash
# Runs braid's whole test suite through Bazel and ends with one line "N passed, N failed",
# counting Catch2 test cases (a target without a Catch2 summary counts as one case).
set -uo pipefail
cd "$(dirname "$0")/.."
command -v bazel >/dev/null || .ci/setup.sh
log=$(mktemp)
bazel test //... --test_output=errors "$@" 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}

passed=0
failed=0
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
# Lines such as "//tests/store:store_test   PASSED in 3.1s" or "... FAILED TO BUILD".
while read -r target status; do
  path="$testlogs/$(echo "${target#//}" | tr ':' '/')/test.log"
  cases_passed=""
  cases_failed=0
  if [ -f "$path" ] && [ "$status" != "NO" ]; then
    if line=$(grep -aE "^All tests passed \(" "$path" | tail -1) && [ -n "$line" ]; then
      cases_passed=$(echo "$line" | sed -E 's/.* in ([0-9]+) test cases?\)/\1/')
    elif line=$(grep -aE "^test cases:" "$path" | tail -1) && [ -n "$line" ]; then
      cases_passed=$(echo "$line" | sed -nE 's/.*\| *([0-9]+) passed.*/\1/p')
      cases_failed=$(echo "$line" | sed -nE 's/.*\| *([0-9]+) failed.*/\1/p')
      cases_passed=${cases_passed:-0}
      cases_failed=${cases_failed:-0}
    fi
  fi
  if [ "$status" = "PASSED" ]; then
    passed=$((passed + ${cases_passed:-1}))
  else
    # A failing target counts its failed cases, or one failure if it crashed, timed out or
    # did not build.
    passed=$((passed + ${cases_passed:-0}))
    [ "$cases_failed" -gt 0 ] && failed=$((failed + cases_failed)) || failed=$((failed + 1))
  fi
done < <(grep -aE '^//[^ ]+ +(\(cached\) +)?(PASSED|FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log" |
         sed -E 's/\(cached\) +//' | awk '{print $1, $2}')
rm -f "$log"
if [ "$bazel_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed
fi

# The store's frame parser under libFuzzer for a bounded time (clang builds it, outside Bazel).
# BRAID_FUZZ_SECONDS=0 skips it.
fuzz_seconds="${BRAID_FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" -gt 0 ]; then
  if tests/fuzz/run_store_fuzzer.sh "$fuzz_seconds"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
fi
# The PyTorch backend: pytest tests and PyTorch's own distributed suite (tests/torch/run.sh sets
# up its venv, ~5 GiB). BRAID_TORCH_TESTS=0 skips it; BRAID_TORCH_SUITE=0 keeps only pytest.
if [ "${BRAID_TORCH_TESTS:-1}" != "0" ]; then
  torch_log=$(mktemp)
  tests/torch/run.sh 2>&1 | tee "$torch_log"
  line=$(grep -aE "^[0-9]+ passed, [0-9]+ failed$" "$torch_log" | tail -1)
  rm -f "$torch_log"
  if [ -n "$line" ]; then
    passed=$((passed + $(echo "$line" | cut -d' ' -f1)))
    failed=$((failed + $(echo "$line" | cut -d' ' -f3)))
  else
    failed=$((failed + 1))
  fi
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
