#!/usr/bin/env bash
# Installs what braid needs to build and test on Debian 12, if missing. Idempotent.
set -euo pipefail
# iproute2: ip netns, veth, bridge and tc for the multi-host tests (tests/multihost).
packages=(bazel-bootstrap g++ libasio-dev libspdlog-dev libfmt-dev catch2 libibverbs-dev
          pkg-config python3 python3-matplotlib ca-certificates iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "braid setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Bazel's py_test runs the python3 on PATH, which may not be Debian's (pyenv, venv): give that
# interpreter matplotlib too, for bench/plot_busbw_test.
if ! python3 -c "import matplotlib" 2>/dev/null; then
  python3 -m pip install -q matplotlib || echo "braid setup: could not pip install matplotlib" >&2
fi

# The CUDA compiler and runtime for the CUDA targets (docs/CUDA.md): nvcc 13.0, its headers and
# the static runtime. The machines this project runs on have them at /usr/local/cuda; elsewhere
# they come from NVIDIA's PyPI wheels (the NVIDIA apt repository is not reachable from CI, and
# Debian's nvidia-cuda-toolkit is 11.8, older than the GPU machine's CUDA 13). 13.0 exactly: the
# GPU machine's driver (580) runs what 13.0 builds. Bazel finds this folder by itself
# (third_party/cuda/cuda_configure.bzl); if the install fails, //tests/gpu:cuda_build_test fails
# and says why.
cuda_wheels=/opt/braid-cuda
if [ ! -x "${BRAID_CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ] && [ ! -x "$cuda_wheels/nvidia/cu13/bin/nvcc" ]; then
  echo "braid setup: no CUDA compiler found; installing CUDA 13.0 (nvcc, runtime) from PyPI into $cuda_wheels"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $sudo apt-get install -y -q --no-install-recommends python3-pip
  fi
  # --break-system-packages: Debian's pip refuses installs outside a venv, but --target writes
  # only into $cuda_wheels.
  $sudo python3 -m pip install -q --no-deps --target "$cuda_wheels" --break-system-packages \
      nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
      nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 ||
    echo "braid setup: CUDA wheels could not be installed; the CUDA targets will not build" >&2
fi
