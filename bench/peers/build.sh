#!/usr/bin/env bash
# Builds braid's peers, gloo_perf and mpi_perf, into bench/peers/out/ (git-ignored).
# Not part of the Bazel build on purpose: these are yardsticks, not braid dependencies.
#   bench/peers/build.sh            install missing packages (apt-get), then build
#   bench/peers/build.sh --no-install
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${PEERS_OUT:-$here/out}"
install=1
[[ "${1:-}" == "--no-install" ]] && install=0

need=()
[[ -f /usr/include/gloo/allreduce.h ]] || need+=(libgloo-dev)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicxx >/dev/null 2>&1 || need+=(libopenmpi-dev)
if ((${#need[@]})); then
  if ((install == 0)); then echo "build.sh: missing packages: ${need[*]}" >&2; exit 1; fi
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "build.sh: installing ${need[*]}" >&2
  $sudo apt-get install -y -q "${need[@]}" >&2 || {
    $sudo apt-get update -q >&2 && $sudo apt-get install -y -q "${need[@]}" >&2; }
fi

mkdir -p "$out"
flags=(-std=c++17 -O2 -Wall -Wextra -Wno-unused-parameter -I"$root")
set -x
g++ "${flags[@]}" "$here/gloo_perf.cc" -o "$out/gloo_perf" -lgloo -pthread
mpicxx "${flags[@]}" -DOMPI_SKIP_MPICXX "$here/mpi_perf.cc" -o "$out/mpi_perf"
