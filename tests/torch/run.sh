#!/usr/bin/env bash
# The PyTorch side of the test suite: sets up the venv and braid_torch (.ci/setup_torch.sh), runs
# tests/torch with pytest, then PyTorch's own distributed suite at world size 2 in braid's own
# slot and in Gloo's. Ends with "N passed, N failed" (skips are not counted as passed).
#   BRAID_TORCH_SUITE=0   skip PyTorch's suite (pytest tests only)
#   BRAID_SUITE_WORLD=3   world size of PyTorch's suite
set -uo pipefail
cd "$(dirname "$0")/../.."
venv="${BRAID_VENV:-$PWD/.venv}"
if ! .ci/setup_torch.sh; then
  echo "0 passed, 1 failed"
  exit 1
fi
py="$venv/bin/python"
passed=0
failed=0
log=$(mktemp)
# Runs from the repository root with the installed braid_torch (not bindings/torch/braid_torch).
"$py" -m pytest -q -p no:cacheprovider tests/torch 2>&1 | tee "$log"
summary=$(grep -aE "^=*.* (passed|failed|error)" "$log" | tail -1)
p=$(echo "$summary" | sed -nE 's/.* ([0-9]+) passed.*/\1/p')
f=$(echo "$summary" | sed -nE 's/.* ([0-9]+) failed.*/\1/p')
e=$(echo "$summary" | sed -nE 's/.* ([0-9]+) errors?.*/\1/p')
passed=$((passed + ${p:-0}))
failed=$((failed + ${f:-0} + ${e:-0}))
[ -z "$summary" ] && failed=$((failed + 1))
if [ "${BRAID_TORCH_SUITE:-1}" != "0" ]; then
  for slot in braid gloo; do
    "$py" tests/torch/run_torch_suite.py --slot "$slot" --world-size "${BRAID_SUITE_WORLD:-2}" >"$log" 2>&1
    grep -aE "\.\.\. (FAIL|ERROR)|^(FAIL|ERROR): test" "$log" | head -40
    line=$(grep -aE "^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped" "$log" | tail -1)
    grep -aE "^slot " "$log" | tail -1
    echo "PyTorch suite, $slot slot: ${line:-no summary}"
    if [ -z "$line" ]; then
      tail -30 "$log"
      failed=$((failed + 1))
    else
      passed=$((passed + $(echo "$line" | cut -d' ' -f1)))
      failed=$((failed + $(echo "$line" | cut -d' ' -f3)))
    fi
  done
fi
rm -f "$log"
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
