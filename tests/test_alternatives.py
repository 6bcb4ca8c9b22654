"""A failing model run again with the switches of its own code (runners/alternatives.py): which
switches are worth a run, that a passing model costs nothing more, that gpt-oss's tiny model
passes on the emulated neuron device with experts_implementation='batched_mm' where its default
grouped_mm fails TorchNeuron's routing precondition, and that the sweep stores those runs as
rows of their own that lookup, the report and a reuse read back."""

from __future__ import annotations

import json

import pytest

from ground.schema import Stage
from model_configs.catalog import load_catalog
from reports.store import Store
from runners.alternatives import candidates, switches, try_alternatives, worth_trying
from runners.outcome import AlternativeRun, ModelOutcome, StageResult
from runners.settings import ModelSettings
from runners.stages import default_stages
from tests.cli_in_process import hfsweep_in_process
from tests.neuron_support import forked
from tests.warm_fork import run_cli

THREE = (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)


def stage_rows(statuses: list[str], **failure: object) -> list[dict]:
    out = []
    for stage, status in zip(["load", "forward", "backward"], statuses, strict=True):
        row = {"stage": stage, "status": status, "reason": None, "error_message": None}
        if status == "fail":
            row.update(failure)
        out.append(row)
    return out


PRECONDITION = {
    "error_type": "ValueError",
    "failing_op": "aten::_grouped_mm",
    "error_message": "offs must be divisible by 128 (TorchNeuron's _grouped_mm precondition)",
}


def test_which_switches_are_worth_a_run() -> None:
    failed = stage_rows(["pass", "fail", "not_run"], **PRECONDITION)
    assert worth_trying(failed, "auto") == ["experts_implementation"]  # the class's `try`
    assert worth_trying(failed, "all") == [s.name for s in switches()]
    assert worth_trying(failed, "none") == []
    lstm = stage_rows(["pass", "fail", "not_run"], error_type="NoHostKernelError")
    assert worth_trying(lstm, "auto") == []  # no setting of the model avoids a missing kernel
    assert worth_trying(stage_rows(["pass"] * 3), "all") == []  # it passed: nothing more
    load = stage_rows(["fail", "not_run", "not_run"], error_type="RuntimeError")
    assert worth_trying(load, "all") == []  # a switch applies to a loaded model
    timeout = stage_rows(["pass", "timeout", "not_run"])
    assert worth_trying(timeout, "all") == []  # another whole limit, for no sign


def test_a_passing_model_runs_nothing_more() -> None:
    def run(*args: object) -> ModelOutcome:
        raise AssertionError("a passing model must not run again")

    passed = ModelOutcome([StageResult(s.value, "pass") for s in THREE])
    assert try_alternatives(None, ModelSettings(), passed, run=run) == []  # type: ignore[arg-type]
    explicit = ModelSettings(implementation="experts_implementation=eager")
    failed = ModelOutcome(
        [StageResult("load", "pass"), StageResult("forward", "fail", **PRECONDITION)]
    )
    assert try_alternatives(None, explicit, failed, run=run) == []  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def gpt_oss():
    from sweep.plan import plan_entry

    catalog = load_catalog()
    planned = plan_entry(
        catalog.get("openai/gpt-oss-20b"), list(default_stages()), config_dir=catalog.config_dir
    )
    assert planned.spec is not None
    return planned.spec


@forked  # neuron in a fresh process: this one may have run a backward before (see neuron_support)
def test_gpt_oss_passes_with_batched_mm_where_grouped_mm_fails_the_precondition(gpt_oss) -> None:
    from runners.isolation import run_isolated

    assert candidates(gpt_oss, stage_rows(["pass", "fail", "not_run"], **PRECONDITION), "auto") == [
        "experts_implementation=batched_mm",
        "experts_implementation=eager",
    ]
    settings = ModelSettings(device="neuron", stages=THREE)
    default = run_isolated(gpt_oss, settings)
    forward = default.stages[1]
    assert (forward.status, forward.failing_op) == ("fail", "aten::_grouped_mm")
    assert "offs must be divisible by 128" in (forward.error_message or "")
    ran: list[str] = []
    tried = try_alternatives(gpt_oss, settings, default, on_try=ran.append)
    # batched_mm passes, so eager (the same switch's next value) is not run
    assert ran == ["experts_implementation=batched_mm"]
    assert [a.implementation for a in tried] == ["experts_implementation=batched_mm"]
    assert tried[0].passed and [s.status for s in tried[0].stages] == ["pass"] * 3
    assert tried[0].wall_s is not None and tried[0].wall_s > 0


@pytest.mark.slow
@forked  # the sweep in a fork of the warm process, which never set a device up
def test_the_sweep_stores_alternatives_as_rows_of_their_own_and_reads_them_back(
    tmp_path,
) -> None:
    """`hfsweep run --local` on gpt-oss: its results keep the default's failure (the headline
    counts it failed), the alternatives table holds the batched_mm run, lookup and the report
    say "passes with", and a later run's reuse copies the alternatives with the results."""
    store = tmp_path / "store"

    model = "openai/gpt-oss-20b"
    run = run_cli(
        ["run", "--local", "--device", "neuron", "--models", model, "--stages",
         "load,forward,backward", "--store", str(store), "--run-id", "first", "--no-report"],
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    results = Store(store).read("results", "first").to_pylist()
    assert [r["status"] for r in results] == ["pass", "fail", "not_run"]
    alternatives = Store(store).read("alternatives", "first").to_pylist()
    assert {r["implementation"] for r in alternatives} == {"experts_implementation=batched_mm"}
    assert [r["status"] for r in alternatives] == ["pass"] * 3
    assert Store(store).runs()[0]["alternatives"] == "auto"
    # the readers: the CLI's function in this process (their answers are under test)
    lookup = hfsweep_in_process("lookup", model, "--store", str(store))
    assert lookup.returncode == 1, lookup.stdout + lookup.stderr  # the default fails
    assert "next: passes with experts_implementation='batched_mm' (run:" in lookup.stdout
    assert (
        "run: hfsweep check openai/gpt-oss-20b --device neuron --stages load,forward,backward "
        "--implementation experts_implementation=batched_mm"
    ) in lookup.stdout
    assert "at full size: not the tiny input's size" in lookup.stdout
    data = json.loads(
        hfsweep_in_process("lookup", model, "--store", str(store), "--format", "json").stdout
    )
    assert data["next_step"]["proven"] == "experts_implementation=batched_mm"
    report = hfsweep_in_process("report", "--store", str(store))
    assert "1 with experts_implementation=batched_mm" in report.stdout
    # a reuse copies the task's alternatives with its results
    from sweep.reuse import lead_outcomes

    ((lead, _, outcome),) = list(lead_outcomes(Store(store), "first"))
    assert lead == model
    assert [(a.implementation, a.passed) for a in outcome.alternatives] == [
        ("experts_implementation=batched_mm", True)
    ]
    assert isinstance(outcome.alternatives[0], AlternativeRun)
