#!/usr/bin/env bash
# Creates .venv and installs hfsweep into it (CPU build of torch, pinned: a bare `torch`
# requirement would pull a multi-GB CUDA build). Usage: scripts/install.sh [extra]  (e.g. dev)
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
extra=${1:-}
if [ -n "$extra" ]; then
  .venv/bin/python -m pip install -q -e ".[$extra]"
else
  .venv/bin/python -m pip install -q -e .
fi
