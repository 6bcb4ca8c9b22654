#!/usr/bin/env bash
# Resolves requirements/lock.txt: exact versions of every package that `scripts/install.sh`
# installs (the extras all, ultralytics and dev, and what they pull in), for every platform and
# Python the project supports (uv's universal resolution writes environment markers where they
# differ). pyproject.toml keeps the compatible ranges; the lock is what the README's commands
# and CI install, as pip constraints.
#
#   bash scripts/lock.sh                  keep every locked version that still fits; add what is new
#   bash scripts/lock.sh --upgrade        the newest versions pyproject.toml allows (run
#                                         scripts/upgrade_check.sh first: it shows what they change)
#   bash scripts/lock.sh --upgrade-package transformers   move one package
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
if [ ! -x "$UV" ]; then
  echo "scripts/lock.sh: $UV not found: run scripts/install.sh dev first (uv is in the dev extra)" >&2
  exit 2
fi
# torch stays on the project's pin (TorchNeuron's beta targets PyTorch 2.14)
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
printf 'torch==2.14.1\ntorchvision==0.29.1\n' > "$pins"
"$UV" pip compile pyproject.toml --extra all --extra ultralytics --extra dev \
  --universal --constraint "$pins" --no-header --quiet \
  --output-file requirements/lock.txt "$@"
{
  echo "# hfsweep's locked dependencies: made by 'bash scripts/lock.sh' (uv pip compile --universal);"
  echo "# installed as pip constraints by scripts/install.sh. Do not edit by hand."
  cat requirements/lock.txt
} > "$pins.lock" && mv "$pins.lock" requirements/lock.txt
echo "requirements/lock.txt: $(grep -c '^[A-Za-z]' requirements/lock.txt) pins" >&2
