#!/usr/bin/env bash
# One command from a fresh clone: install, sweep the 50 most downloaded models of the bundled
# offline catalog on the emulated neuron device with an embedded local Ray, print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/hfsweep run --device neuron --top "${TOP:-50}" --store "${HFSWEEP_STORE:-hfsweep-store}" "$@"
