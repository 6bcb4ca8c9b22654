#!/usr/bin/env bash
# Creates .venv and installs hfsweep into it at the versions of requirements/lock.txt (pip
# constraints resolved by scripts/lock.sh), so the same commit installs the same stack on any
# day. pip installs uv (pinned by the lock), uv installs everything else.
# Usage: scripts/install.sh [extras]  (e.g. dev or all,dev); default `all`: every library
# adapter's package except ultralytics (AGPL-3.0, opt in with `scripts/install.sh all,ultralytics`).
# LOCK=path/to/constraints.txt installs against another lock (scripts/upgrade_check.sh uses it);
# LOCK=none installs the newest versions pyproject.toml allows.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
LOCK=${LOCK:-requirements/lock.txt}
PIP_VERSION=26.3
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q "pip==$PIP_VERSION"
extra=${1:-all}
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# torch 2.14.1 with its torchvision 0.29.1 (TorchNeuron's beta targets PyTorch 2.14). On a GPU
# machine install the build you want into the venv first: an installed torch is kept, and the
# adapters' packages must not move it.
if "$VENV/bin/python" -c "import torch, torchvision" 2>/dev/null; then
  "$VENV/bin/python" -c "import torch, torchvision; print(f'torch=={torch.__version__.split(\"+\")[0]}\ntorchvision=={torchvision.__version__.split(\"+\")[0]}')" > "$constraints"
  lock_filter='^(torch|torchvision)=='
else
  lock_filter='^$'
fi
if [ "$LOCK" != none ]; then
  grep -v -E "$lock_filter" "$LOCK" >> "$constraints"
else
  printf 'torch==2.14.1\ntorchvision==0.29.1\n' >> "$constraints"
fi
# uv installs the same versions as pip would, in a fraction of pip's time (it resolves, fetches
# and unpacks in parallel).
"$VENV/bin/python" -m pip install -q -c "$constraints" uv
uv_install=("$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -c "$constraints")
# Where PYTHONDONTWRITEBYTECODE is set, Python never keeps the bytecode it compiles, so each
# process would compile from source every module it imports (2 s more per process that imports
# transformers): compile every installed module now, as pip does (about 30 s). Elsewhere the
# first import of each module writes its bytecode, for the modules that are used only.
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  uv_install+=(--compile-bytecode)
fi
# uv reads no pip configuration. Where pip is told of wheels on this machine's own disk (its
# find-links and extra index URLs: torch and its CUDA libraries, several GB), uv gets the same
# places, and, as pip does, takes each pinned version from whichever of them has it.
sources=()
for url in ${PIP_EXTRA_INDEX_URL:-$("$VENV/bin/python" -m pip config get global.extra-index-url 2>/dev/null || true)}; do
  sources+=(--extra-index-url "$url")
done
for path in ${PIP_FIND_LINKS:-$("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)}; do
  sources+=(--find-links "$path")
done
if [ ${#sources[@]} -gt 0 ]; then
  uv_install+=("${sources[@]}" --index-strategy unsafe-best-match)
fi
if [ "$LOCK" != none ]; then
  # the build backend at its locked version too (no build isolation: nothing unlocked is fetched)
  "${uv_install[@]}" setuptools
  "${uv_install[@]}" --no-build-isolation -e ".[$extra]"
else
  "${uv_install[@]}" --upgrade -e ".[$extra]"
fi
# soundfile (speechbrain's and transformers' audio models import it) loads the system's
# libsndfile where its wheel does not bundle one (the pure-Python wheel some indexes serve):
# install Debian's where this is a root shell with apt, else say what is missing.
if ! "$VENV/bin/python" -c "import soundfile" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/install.sh: installing Debian's libsndfile1 (soundfile needs it)" >&2
    # (waiting for apt's locks: scripts/test.sh installs chromium at the same time)
    apt=(apt-get -o DPkg::Lock::Timeout=600)
    "${apt[@]}" install -y -q libsndfile1 >/dev/null 2>&1 \
      || { "${apt[@]}" update -q >/dev/null && "${apt[@]}" install -y -q libsndfile1 >/dev/null; }
  fi
  "$VENV/bin/python" -c "import soundfile" >/dev/null 2>&1 || {
    echo "scripts/install.sh: soundfile cannot load libsndfile: install it (Debian/Ubuntu: apt-get install libsndfile1)" >&2
    exit 3
  }
fi
