#!/usr/bin/env bash
# The documentation's pictures (docs/dashboard.png, docs/models-failed.png, docs/model-page.png)
# from the demo's own command in the demo's own environment, so they can be refreshed:
#
#   bash scripts/screenshots.sh [STORE]
#
# STORE (default $HFSWEEP_STORE, else hfsweep-store, the demo's) is swept first with
# scripts/demo.sh's command unless it already holds a run; then bench/dashboard_screenshots.py
# serves the dashboard over it and takes the pictures at 1280 px in headless Chromium. The
# model page is openai/gpt-oss-20b's (rank 40 of the bundled catalog, in the demo's 50). It
# drives /usr/bin/chromium through playwright, of the dev extra (`bash scripts/install.sh
# all,dev`; scripts/test.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
STORE="${1:-${HFSWEEP_STORE:-hfsweep-store}}"
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
if [ ! -d "$STORE/runs" ]; then
  .venv/bin/hfsweep run --device neuron --top "${TOP:-50}" --store "$STORE" --no-report
fi
exec .venv/bin/python bench/dashboard_screenshots.py --store "$STORE" --out docs \
  --model "${MODEL:-openai/gpt-oss-20b}"
