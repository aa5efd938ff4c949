#!/usr/bin/env bash
# Installs what braid needs to build and test on Debian 12, if missing. Idempotent.
set -euo pipefail
packages=(bazel-bootstrap g++ libasio-dev libspdlog-dev libfmt-dev catch2 libibverbs-dev
          pkg-config python3 python3-matplotlib ca-certificates)
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
