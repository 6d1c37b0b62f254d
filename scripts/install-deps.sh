#!/usr/bin/env bash
# Installs what building and testing moec needs on Debian 12. Idempotent: a
# fast no-op when everything is present. Usage: scripts/install-deps.sh
set -euo pipefail

packages=(
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22 lld-22
  libclang-rt-22-dev
  pybind11-dev libgtest-dev cmake ninja-build ccache
)
python_dir="$(dirname "$0")/../python"
requirements=(-r "$python_dir/requirements-test.txt"
              -r "$python_dir/requirements-build.txt")

# Python test and build dependencies (pinned) for the python3 on PATH, which
# the Python package is built for (make test installs them again into the
# venvs it installs moec into). Not torch and transformers
# (python/requirements-torch.txt, about 5 GB): make test installs them only
# into build/torch-venv, which its venv of the full package sees.
install_python_deps() {
  if python3 -c "import numpy, pytest, ml_dtypes, scikit_build_core, pybind11" \
      2>/dev/null; then
    return 0
  fi
  echo "install-deps: pip installing" \
    "$(cat "$python_dir"/requirements-{test,build}.txt | grep -v '^#' | xargs)"
  # Debian's own python3 refuses pip without --break-system-packages.
  python3 -m pip install -q --disable-pip-version-check "${requirements[@]}" ||
    python3 -m pip install -q --disable-pip-version-check \
      --break-system-packages "${requirements[@]}"
}

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ! python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" 2>/dev/null; then
  missing+=(python3-dev)  # headers for the pybind11 modules
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  missing+=(python3-pip)
fi
# `python3 -m venv` (make test installs moec into fresh venvs); Debian ships
# ensurepip separately.
if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
  missing+=(python3-venv)
fi

if ((${#missing[@]} == 0)); then
  install_python_deps
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "install-deps: need root (or sudo) to apt-get install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_python_deps
echo "install-deps: done"
