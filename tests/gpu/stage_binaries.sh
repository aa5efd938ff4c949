#!/usr/bin/env bash
# Builds the GPU test binaries here (static cudart: they need only the driver), copies them into
# gpu_bin/ (git-ignored) and packs that into gpu_carry/gpu_bin.tar.xz (git-ignored), the folder
# taken to the GPU machine.
# Usage: tests/gpu/stage_binaries.sh [bazel startup options...]   e.g. --output_base=/root/.cache/x
set -euo pipefail
cd "$(dirname "$0")/../.."
binaries=(cuda_ipc_gpu_test device_collectives_gpu_test device_gpu_test kernels_gpu_test)
targets=()
for b in "${binaries[@]}"; do targets+=("//tests/gpu:$b"); done
# For torch_and_bench_steps.sh: every *_perf (--device cuda, static cudart), the launcher, and
# libbraid.so for braid_torch, which is built there against that machine's torch.
perf_programs=(all_reduce_perf all_gather_perf broadcast_perf reduce_perf reduce_scatter_perf
               alltoall_perf gather_perf scatter_perf sendrecv_perf)
for p in "${perf_programs[@]}"; do targets+=("//bench:$p"); done
targets+=(//rendezvous:braidrun //bindings/c:libbraid_cuda.so)
bazel "$@" build "${targets[@]}" --symlink_prefix=/
bin_dir=$(bazel "$@" info bazel-bin 2>/dev/null)
mkdir -p gpu_bin
for b in "${binaries[@]}"; do
  install -m 755 "$bin_dir/tests/gpu/$b" gpu_bin/
done
for p in "${perf_programs[@]}"; do install -m 755 "$bin_dir/bench/$p" gpu_bin/; done
install -m 755 "$bin_dir/rendezvous/braidrun" gpu_bin/
install -m 755 "$bin_dir/bindings/c/libbraid_cuda.so" gpu_bin/libbraid.so
echo "staged in gpu_bin/: ${binaries[*]} ${perf_programs[*]} braidrun libbraid.so"
# What travels to the GPU machine: the device tool carries at most 64 MiB with the working tree,
# and these binaries (each with static cudart) come to more than that; compressed, about 4 MiB.
mkdir -p gpu_carry
tar -cJf gpu_carry/gpu_bin.tar.xz gpu_bin
echo "packed gpu_carry/gpu_bin.tar.xz ($(du -h gpu_carry/gpu_bin.tar.xz | cut -f1)): carry gpu_carry and run"
echo "  tests/gpu/run_on_device.sh gpu_carry/gpu_bin.tar.xz \$OUT/gpu_report.json"
