#!/usr/bin/env bash
# Creates .venv and installs hfsweep into it at the versions of requirements/lock.txt (pip
# constraints resolved by scripts/lock.sh), so the same commit installs the same stack on any
# day. pip installs torch (from the machine's own wheels where it has them), uv the rest.
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
# torch 2.14.1 with its torchvision 0.29.1 (TorchNeuron's beta targets PyTorch 2.14). On a GPU
# machine install the build you want into the venv first: an installed torch is kept.
"$VENV/bin/python" -c "import torch, torchvision" 2>/dev/null || \
  "$VENV/bin/python" -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
extra=${1:-all}
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# the adapters' packages must not move torch off the installed build
"$VENV/bin/python" -c "import torch, torchvision; print(f'torch=={torch.__version__.split(\"+\")[0]}\ntorchvision=={torchvision.__version__.split(\"+\")[0]}')" > "$constraints"
if [ "$LOCK" != none ]; then
  grep -v -E '^(torch|torchvision)==' "$LOCK" >> "$constraints"
fi
# uv installs the rest: the same versions as pip would, in less than half the time (it resolves
# and fetches in parallel). It is pinned by the lock like everything else. Like pip, it
# compiles every module it installs to bytecode: where PYTHONDONTWRITEBYTECODE is set, each
# process would otherwise compile from source every module it imports (2 s more per process
# that imports transformers).
"$VENV/bin/python" -m pip install -q -c "$constraints" uv
uv_install=("$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python" -c "$constraints")
if [ "$LOCK" != none ]; then
  # the build backend at its locked version too (no build isolation: nothing unlocked is fetched)
  "${uv_install[@]}" setuptools
  "${uv_install[@]}" --no-build-isolation -e ".[$extra]"
else
  "${uv_install[@]}" --upgrade -e ".[$extra]"
fi
