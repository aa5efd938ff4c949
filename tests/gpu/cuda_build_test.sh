#!/usr/bin/env bash
# Checks in CPU-only CI that the CUDA build produced what the GPU machine needs:
#   1. the toolkit was found (otherwise every CUDA target was skipped: this test fails, loudly);
#   2. nvcc is CUDA 13 (the GPU machine's driver 580 runs CUDA 13.0 binaries);
#   3. every nvcc object carries sm_90 machine code and compute_90 PTX (tests/gpu/fatbin_archs.py
#      reads the fat binary's entries);
#   4. every GPU binary is linked without libcudart.so (the GPU machine has none of it) and
#      carries the sm_90 code;
#   5. every GPU binary, run here without a GPU, says so and exits 77 (skipped), not crash or pass.
# Usage: cuda_build_test.sh fatbin_archs.py [--objects O... --binaries B...]
set -uo pipefail
parser=$1
shift
if [ "${CUDA_FOUND:-0}" != "1" ]; then
  echo "=================================================================================="
  echo "FAILED: no CUDA toolkit, so NO CUDA target was built or tested (they are skipped)."
  echo "Reason: ${CUDA_MISSING_REASON:-unknown}"
  echo "See docs/CUDA.md: .ci/setup.sh installs nvcc 13.0 and the CUDA runtime from PyPI."
  echo "=================================================================================="
  exit 1
fi
objects=()
binaries=()
mode=""
for arg in "$@"; do
  case "$arg" in
    --objects) mode=objects ;;
    --binaries) mode=binaries ;;
    *) if [ "$mode" = objects ]; then objects+=("$arg"); else binaries+=("$arg"); fi ;;
  esac
done
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

echo "CUDA release $CUDA_RELEASE"
case "$CUDA_RELEASE" in
  13.*) ;;
  *) fail "nvcc is CUDA $CUDA_RELEASE; the GPU machine's driver needs binaries from CUDA 13" ;;
esac

[ ${#objects[@]} -gt 0 ] || fail "no nvcc objects were given"
for obj in "${objects[@]}"; do
  archs=$(python3 "$parser" "$obj" 2>&1) || { fail "$obj: $archs"; continue; }
  echo "$obj: $archs"
  echo "$archs" | grep -qx "sm_90 elf" || fail "$obj has no sm_90 machine code"
  echo "$archs" | grep -qx "sm_90 ptx" || fail "$obj has no compute_90 PTX"
done

[ ${#binaries[@]} -gt 0 ] || fail "no GPU binaries were given"
for bin in "${binaries[@]}"; do
  name=$(basename "$bin")
  if readelf -d "$bin" | grep -q "NEEDED.*libcudart"; then
    fail "$name links libcudart.so dynamically; the GPU machine has none"
  fi
  archs=$(python3 "$parser" "$bin" 2>&1)
  echo "$archs" | grep -qx "sm_90 elf" || fail "$name carries no sm_90 machine code (the kernels were not linked in): $archs"
  out=$("$bin" 2>&1)
  rc=$?
  if [ -e /dev/nvidia0 ]; then
    [ "$rc" -eq 0 ] || fail "$name failed on this machine's GPU (exit $rc): $out"
  elif [ "$rc" -ne 77 ] || ! echo "$out" | grep -q "SKIPPED: no CUDA device"; then
    fail "$name without a GPU should say 'SKIPPED: no CUDA device' and exit 77; exit $rc: $out"
  else
    echo "$name without a GPU: $out"
  fi
done

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CUDA build checks passed"
