#!/usr/bin/env bash
# Builds the GPU test binaries here (static cudart: they need only the driver) and copies them,
# with run_on_device.sh, into gpu_bin/ (git-ignored), the folder taken to the GPU machine.
# Usage: tests/gpu/stage_binaries.sh [bazel startup options...]   e.g. --output_base=/root/.cache/x
set -euo pipefail
cd "$(dirname "$0")/../.."
binaries=(cuda_ipc_gpu_test device_collectives_gpu_test device_gpu_test kernels_gpu_test)
targets=()
for b in "${binaries[@]}"; do targets+=("//tests/gpu:$b"); done
bazel "$@" build "${targets[@]}" --symlink_prefix=/
bin_dir=$(bazel "$@" info bazel-bin 2>/dev/null)
mkdir -p gpu_bin
for b in "${binaries[@]}"; do
  install -m 755 "$bin_dir/tests/gpu/$b" gpu_bin/
done
echo "staged in gpu_bin/: ${binaries[*]}"
