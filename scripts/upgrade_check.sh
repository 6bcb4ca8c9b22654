#!/usr/bin/env bash
# What the newest versions pyproject.toml allows change, before the lock moves to them: installs
# them into a second venv ($UPGRADE_VENV, default .venv-upgrade), runs the test suite there,
# sweeps the bundled top N on the emulated neuron device with both stacks into one store and
# prints the diff (scripts/upgrade_check.py; docs/install.md says how to read it).
#
#   bash scripts/upgrade_check.sh                        install, whole suite, top 50
#   bash scripts/upgrade_check.sh --top 20 -- tests/test_families_vision_language_b.py
#   bash scripts/upgrade_check.sh --no-install --no-tests   sweeps and diff only
#
# Exit status: 0 nothing the newest stack breaks (tests pass, no model newly fails); 1 tests
# fail under the newest stack; 4 models that pass on the lock fail on the newest; 5 both;
# 2 bad usage; 3 a step could not run (the install, a sweep that did not finish).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCKED_VENV=${LOCKED_VENV:-.venv}
UPGRADE_VENV=${UPGRADE_VENV:-.venv-upgrade}
install=1
for arg in "$@"; do
  [ "$arg" = "--" ] && break
  [ "$arg" = "--no-install" ] && install=0
done
if [ ! -x "$LOCKED_VENV/bin/hfsweep" ]; then
  echo "scripts/upgrade_check.sh: no hfsweep in $LOCKED_VENV: run scripts/install.sh all,ultralytics,dev first (or set LOCKED_VENV)" >&2
  exit 2
fi
if [ "$install" = 1 ]; then
  echo "== installing the newest versions pyproject.toml allows into $UPGRADE_VENV" >&2
  if ! VENV="$UPGRADE_VENV" LOCK=none bash scripts/install.sh all,ultralytics,dev; then
    echo "scripts/upgrade_check.sh: the install of the newest versions failed (above)" >&2
    exit 3
  fi
fi
exec "$LOCKED_VENV/bin/python" scripts/upgrade_check.py \
  --locked "$LOCKED_VENV" --newest "$UPGRADE_VENV" "$@"
