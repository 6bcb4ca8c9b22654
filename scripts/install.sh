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
# torch 2.13.0 (a CPU build where one is provided, e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu;
# on a GPU machine install the CUDA build you want into .venv first: an installed torch is kept).
.venv/bin/python -c "import torch" 2>/dev/null || \
  .venv/bin/python -m pip install -q "torch==2.13.0"
extra=${1:-}
if [ -n "$extra" ]; then
  .venv/bin/python -m pip install -q -e ".[$extra]"
else
  .venv/bin/python -m pip install -q -e .
fi
