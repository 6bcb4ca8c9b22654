#!/usr/bin/env bash
# One command from a fresh clone: install, sweep the 50 most downloaded models of the bundled
# offline catalog on the emulated neuron device with an embedded local Ray, print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
store="${HFSWEEP_STORE:-hfsweep-store}"
status=0
.venv/bin/hfsweep run --device neuron --top "${TOP:-50}" --store "$store" "$@" || status=$?
# The install does not put hfsweep on the PATH: what to type next, with the store just written.
cat >&2 <<EOF

next: source .venv/bin/activate   (or call .venv/bin/hfsweep), then
  hfsweep dashboard --store $store                      # the dashboard on http://127.0.0.1:8000
  hfsweep lookup openai-community/gpt2 --store $store   # one model: its stages, next step, repro
EOF
exit "$status"
