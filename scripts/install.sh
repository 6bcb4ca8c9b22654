#!/usr/bin/env bash
# Creates .venv and installs hfsweep into it (torch pinned: a bare `torch` requirement would pull
# whatever build the index serves). Usage: scripts/install.sh [extras]  (e.g. dev or all,dev);
# default `all`: every library adapter's package except ultralytics (AGPL-3.0, opt in with
# `scripts/install.sh all,ultralytics`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch 2.14.1 with its torchvision 0.29.1 (TorchNeuron's beta targets PyTorch 2.14). On a GPU
# machine install the build you want into .venv first: an installed torch is kept.
.venv/bin/python -c "import torch, torchvision" 2>/dev/null || \
  .venv/bin/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
extra=${1:-all}
# the adapters' packages must not move torch off the pin
constraints=$(mktemp)
.venv/bin/python -c "import torch, torchvision; print(f'torch=={torch.__version__.split(\"+\")[0]}\ntorchvision=={torchvision.__version__.split(\"+\")[0]}')" > "$constraints"
.venv/bin/python -m pip install -q -c "$constraints" -e ".[$extra]"
rm -f "$constraints"
