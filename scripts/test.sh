#!/usr/bin/env bash
# One command from a fresh clone: install (with test tools and headless Chromium), lint, type
# check, build the documentation site (a broken link or a page left out fails it), run every
# test offline.
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite starts hundreds of Python processes (each `hfsweep`, Ray worker, device check):
# the first import of each module writes its bytecode, and every later process reads it,
# rather than each compiling from source what it imports (where the variable was set)
unset PYTHONDONTWRITEBYTECODE
# Debian's chromium for the browser tests installs while the Python packages do (both wait
# on downloads and disks more than on the CPU)
apt_pid=
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian chromium for the browser tests" >&2
  (apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null \
    && apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium >/dev/null) &
  apt_pid=$!
fi
bash scripts/install.sh all,ultralytics,dev
if [ -n "$apt_pid" ]; then
  wait "$apt_pid" || { echo "scripts/test.sh: installing chromium failed" >&2; exit 3; }
fi
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
export YOLO_OFFLINE=True YOLO_VERBOSE=False
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== docs" >&2
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
# mypy (one core for 20 s on a clean clone) runs beside pytest, which waits on processes as
# often as it computes; its report and its verdict come after pytest's.
mypy_out=$(mktemp)
.venv/bin/mypy > "$mypy_out" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_out"' EXIT
echo "== pytest" >&2
# On pytest-xdist workers (docs/testing.md): most tests wait on child processes, Ray and
# servers, so more workers than cores; `loadgroup` keeps each xdist_group (the embedded Ray's
# users, the browser tests, a module's cluster) on one worker; the ten slowest tests at the end
# keep the budget in sight. HFSWEEP_TEST_WORKERS=0 runs in this process, one test at a time.
pytest_rc=0
.venv/bin/pytest -n "${HFSWEEP_TEST_WORKERS:-3}" --dist loadgroup --durations=10 "$@" || pytest_rc=$?
echo "== mypy" >&2
mypy_rc=0
wait "$mypy_pid" || mypy_rc=$?
cat "$mypy_out"
trap - EXIT
rm -f "$mypy_out"
if [ "$pytest_rc" != 0 ]; then
  exit "$pytest_rc"
fi
exit "$mypy_rc"
