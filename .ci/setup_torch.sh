#!/usr/bin/env bash
# Sets up the PyTorch side on Debian 12, if missing (idempotent): Debian's python3-venv and
# python3-dev, a virtual environment at $BRAID_VENV (default .venv in the repository) with the
# pinned torch, ignite and test tools (bindings/torch/requirements.txt, ~5 GiB, about a minute),
# then builds and installs braid_torch into it. Run .ci/setup.sh first (Bazel builds libbraid).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${BRAID_VENV:-$PWD/.venv}"
packages=(python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Debian's interpreter, not whatever python3 is first on PATH (pyenv, conda): the extension
# links against the headers python3-dev installed for it.
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r bindings/torch/requirements.txt
# --no-build-isolation: compile against the torch just installed instead of downloading another.
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation ./bindings/torch
echo "braid setup: braid_torch installed in $venv ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
