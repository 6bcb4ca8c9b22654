"""The fast part of the fault matrix (`bench/fault_matrix.py --fast`) on real sweeps: one
trial of every fault type inside a model and inside an op-sweep task (real Ray), a node that
leaves a real two-node cluster, an environment that keeps failing (made by
tests/test_driver_faults.py: MADE_ELSEWHERE), and a driver stopped with
SIGTERM, then killed with SIGKILL (at an explicit point: the run's last model waiting, rows in
the store), and resumed. Every trial must survive with nothing lost, doubled, orphaned or
mislabelled; the long trials (20 per fault type, 30 kills at random moments) stay in the
bench."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys

import pytest

from tests.conftest import ROOT
from tests.neuron_support import forked

pytestmark = pytest.mark.slow


# The faults each section of `--fast` must try (the bench's own lines for the healthy models
# and the sweep as a whole come on top). Together: every fault type of the fast matrix.
SECTIONS = {
    "model": {
        "segfault in a stage",
        "hang in a stage",
        "allocation past the memory budget",
        "exception that cannot be pickled",
        "child killed from outside (kill -9)",
        "worker killed mid-task",
        "device error in the child (set-up)",
        "device error inside a stage",
        "environment error while planning",
        "runtime env that cannot be set up",
        "lost object (ObjectLostError on get)",
        "part of no rows truncated to 100 bytes",
    },
    "node": {"a node that leaves the cluster"},
    "env": {"environment error that keeps happening"},
    # the SIGKILL at an explicit point (its last model waiting, rows stored), then resumed
    "kill": {
        "driver stopped with SIGTERM mid-run",
        "driver killed (SIGKILL) with a task in flight",
    },
    # the same faults inside op-sweep tasks (planning is the model sweep's alone)
    "ops": {
        "op: segfault in a sample",
        "op: hang in a sample",
        "op: allocation past the memory budget",
        "op: exception that cannot be pickled",
        "op: child killed from outside (kill -9)",
        "op: worker killed mid-task",
        "op: device error in the child (set-up)",
        "op: device error inside a sample",
        "op: runtime env that cannot be set up",
        "op: lost object (ObjectLostError on get)",
    },
}


# Sections whose one trial a test elsewhere makes, with the same checks, so that CI does not
# make it twice: the `env` trial is the same `--local` command twice (the fault, then without
# it) with the same assertions (exit 3 naming the model, no row for it, then every row once,
# nothing left behind).
MADE_ELSEWHERE = {
    "env": ("tests.test_driver_faults", "test_the_cli_says_which_models_got_no_rows_and_exits_3")
}


def test_the_sections_are_the_fast_matrix() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import fault_matrix
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert ",".join(SECTIONS) == fault_matrix.FAST_SECTIONS
    for module, test in MADE_ELSEWHERE.values():
        assert callable(getattr(importlib.import_module(module), test))


# One test per section: each is a few minutes of real sweeps, and on several xdist workers the
# sections run side by side instead of one after another. The bench's own process is a child of
# the warm forkserver (`@forked`), which has imported what the bench imports to write its trial
# catalog and plan it (transformers' configs, the planner: about 13 CPU s in a fresh
# interpreter); the drivers, Ray and the models it starts are the processes they always are.
@pytest.mark.parametrize("section", [s for s in SECTIONS if s not in MADE_ELSEWHERE])
@forked
def test_the_fast_fault_matrix_holds_its_target(tmp_path, section):
    out = tmp_path / "matrix.json"
    sys.path.insert(0, str(ROOT / "bench"))
    import fault_matrix

    table, diagnostics = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(table), contextlib.redirect_stderr(diagnostics):
        try:
            code = fault_matrix.main(["--fast", "--sections", section, "--json", str(out)])
        except BaseException as exc:  # what the bench said before it stopped goes with its error
            raise AssertionError(f"{diagnostics.getvalue()[-3000:]}\n{exc!r}") from exc
    table, tail = table.getvalue(), diagnostics.getvalue()[-3000:]
    assert out.exists(), tail
    lines = json.loads(out.read_text())
    assert {ln["fault"] for ln in lines} >= SECTIONS[section], table
    for ln in lines:
        assert ln["trials"] >= 1 and ln["survived"] == ln["trials"], table + tail
        assert (ln["lost"], ln["duplicated"], ln["orphans"], ln["mislabelled"]) == (0, 0, 0, 0), (
            table + tail
        )
    assert code == 0, table
