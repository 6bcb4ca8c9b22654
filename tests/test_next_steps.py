"""The next-step table (ground/data/next_steps.json with each device's classes merged in): every failure class has one line to act
on, the right class answers each kind of row, a precondition says what the full-size model
meets, and a step run with another implementation says "passes with ..." (pure functions)."""

from __future__ import annotations

import pytest

from ground import next_steps
from ground.next_steps import Alternative, classes, classify, next_step, routed_rows_note
from ground.schema import SkipReason, Status
from runners.alternatives import switches

STAGES = ["load", "forward", "backward", "compile", "generate"]


def rows(first_failure: dict | None = None, at: str = "forward", **default: object) -> list[dict]:
    """Stage rows passing up to `at`, failing there with `first_failure`, not run after."""
    out = []
    failed = False
    for stage in STAGES:
        row = {
            "stage": stage,
            "status": "pass",
            "reason": None,
            "error_type": None,
            "error_message": None,
            "failing_op": None,
            "fallback_op_count": 0,
            "dtype": "fp32",
            **default,
        }
        if failed:
            row.update(status="not_run", error_message=f"{at} did not pass")
        elif first_failure is not None and stage == at:
            row.update(status="fail", **first_failure)
            failed = True
        out.append(row)
    return out


def skipped(reason: str, message: str = "why") -> list[dict]:
    return [
        {"stage": s, "status": "skip", "reason": reason, "error_message": message} for s in STAGES
    ]


def test_the_table_has_one_line_a_reason_and_a_unique_key_per_class() -> None:
    table = classes()
    keys = [c.failure for c in table]
    assert len(keys) == len(set(keys))
    for c in table:
        assert c.step and "\n" not in c.step and len(c.step) <= 220, c.failure
        assert c.reason and c.title, c.failure
        assert set(c.try_switches) <= {s.name for s in switches()}
    # every skip reason that stops a model (not not_applicable, not a tp stage's missing plan:
    # `NOT_A_STOP`), and every failed status, has a class of its own
    matched = {r for c in table for r in c.match.get("reason", [])}
    assert {r.value for r in SkipReason} - next_steps.NOT_A_STOP <= matched
    statuses = {s for c in table for s in c.match.get("status", [])}
    assert {"timeout", "oom", "crash", "fail_accuracy", "fail", "skip", "pass"} <= statuses


@pytest.mark.parametrize(
    ("failure", "expect_class", "expect_text"),
    [
        (
            {
                "error_type": "NoHostKernelError",
                "failing_op": "aten::_thnn_fused_lstm_cell",
                "error_message": "aten::_thnn_fused_lstm_cell has no neuron kernel, ...",
            },
            "no_kernel_anywhere",
            "the device needs a kernel for aten::_thnn_fused_lstm_cell",
        ),
        (
            {
                "error_type": "HostArgumentError",
                "failing_op": "aten::_index_put_impl_",
                "error_message": "aten::_index_put_impl_: Non-scalar tensor arg1[0] is on cpu",
            },
            "host_tensor",
            "passes a CPU tensor to aten::_index_put_impl_",
        ),
        (
            {"error_type": "RuntimeError", "error_message": "shapes do not match"},
            "model_error",
            "run it on the CPU",
        ),
        (
            {"error_type": "NotImplementedError", "error_message": "Unsupported dtype BFloat16"},
            "dtype_in_model",
            "--dtype fp32",
        ),
    ],
)
def test_each_failure_gets_its_class_and_step(failure, expect_class, expect_text) -> None:
    step = next_step(rows(failure), model="org/m", device="neuron")
    assert step.failure == expect_class
    assert expect_text in step.text
    assert "\n" not in step.text


def test_limits_name_the_command_with_the_limit_doubled() -> None:
    timeout = rows()
    timeout[1].update(status="timeout", error_type="Timeout", error_message="forward did not end")
    step = next_step(timeout, model="org/m", device="neuron", timeout_s=300)
    assert step.failure == "timeout"
    assert step.command == "hfsweep check org/m --device neuron --timeout 600"
    oom = rows()
    oom[1].update(status="oom", error_type="OutOfMemoryError", error_message="past its budget")
    step = next_step(oom, model="org/m", device="neuron", memory_limit_bytes=4 * 2**30)
    assert step.failure == "oom" and "(its budget: 4 GiB)" in step.text
    assert step.command == "hfsweep check org/m --device neuron --memory-limit 8"
    crash = rows()
    crash[1].update(status="crash", error_type="WorkerCrashed", error_message="SIGSEGV")
    assert next_step(crash, model="m", device="neuron").failure == "crash"
    wrong = rows()
    wrong[1].update(status="fail_accuracy", error_type="AccuracyError", error_message="differs")
    assert next_step(wrong, model="m", device="neuron").command.endswith("--dtype fp32")


@pytest.mark.parametrize(
    ("reason", "message", "expect_class", "expect_command"),
    [
        (
            "missing_package",
            "timm models need the timm package: bash scripts/install.sh all,timm",
            "missing_package",
            "bash scripts/install.sh all,timm",
        ),
        (
            "missing_package",
            "needs ultralytics: pip install 'hfsweep[ultralytics]'",  # a row of an older run
            "missing_package",
            "bash scripts/install.sh all,ultralytics",
        ),
        ("missing_package", "needs it: pip install expecttest", "missing_package", "pip install"),
        ("remote_code", "auto_map, trust_remote_code stays off", "remote_code", None),
        ("unknown_model_type", "transformers 5.24.0 does not know", "unknown_model_type", None),
        ("malformed_config", "no model_type", "malformed_config", None),
        ("no_model_class", "no class builds it", "no_model_class", "--architecture CLASS"),
        ("gated", "licence", "gated", "hfsweep check org/m --device neuron"),
        ("device_unsupported_feature", "no fp16", "dtype_unsupported", "--dtype fp32"),
    ],
)
def test_skips_get_their_reason_s_step(reason, message, expect_class, expect_command) -> None:
    step = next_step(skipped(reason, message), model="org/m", device="neuron")
    assert step.failure == expect_class
    if expect_command is None:
        assert step.command is None
    else:
        assert step.command is not None and expect_command in step.command


def test_passes_say_what_is_left_to_do() -> None:
    clean = rows()
    assert next_step(clean, model="m", device="neuron").failure == "passes"
    fell = next_step(clean, model="m", device="neuron", fallbacks=[{"op": "aten::histc"}])
    assert fell.failure == "passes_with_fallbacks" and "CPU fallbacks for aten::histc:" in fell.text
    unverified = rows(unverified_ops=None)
    unverified[3]["unverified_ops"] = ["aten::foo", "aten::bar"]
    step = next_step(unverified, model="m", device="neuron")
    assert step.failure == "passes_unverified" and "aten::bar, aten::foo lower" in step.text


def test_a_summary_s_step_counts_its_ops_and_names_the_store_it_knows() -> None:
    """The report's steps come from summaries, which count ops without naming them: the step
    says how many, never "?", and the report's command names the store, or is left out."""
    from ground.next_steps import step_for_row, summary_row

    fell = summary_row({"dtype": "fp32", "fallback_ops": 2, "unverified": False})
    step = step_for_row(fell, model="m", device="neuron", store="/data/my store")
    assert step.failure == "passes_with_fallbacks" and "CPU fallbacks for 2 ops:" in step.text
    assert step.command == "hfsweep report --store '/data/my store'"
    assert step_for_row(fell, model="m", device="neuron").command is None  # no store: none
    unverified = summary_row({"dtype": "fp32", "fallback_ops": 0, "unverified": True})
    step = step_for_row(unverified, model="m", device="neuron")
    assert step.failure == "passes_unverified"
    assert "passes if the ops no evidence decides lower" in step.text
    for s in (step.text, step.command or ""):
        assert "?" not in s and "STORE" not in s


def test_a_collective_the_process_group_refuses_is_the_device_s_and_no_switch_runs() -> None:
    """fsdp's all_gather that the device's process group raises on: a step about the device's
    process group, never "raised in the model's code", and no implementation switch tried, not
    even with --alternatives all (attention and experts code never change a collective)."""
    from runners.alternatives import worth_trying

    r = rows(
        {
            "error_type": "CollectiveNotImplemented",
            "failing_op": "c10d::all_gather_single",
            "error_message": "ProcessGroupNeuron.all_gather_single: raises NotImplementedError",
        },
        at="forward",
    )
    step = next_step(r, model="m", device="neuron")
    assert step.failure == "collective_refused"
    assert "neuron's process group refuses" in step.text and "c10d::all_gather_single" in step.text
    assert "model's or library's code" not in step.text
    assert worth_trying(r, "auto") == [] and worth_trying(r, "all") == []
    r[1]["error_type"] = "TypeError"  # an error of the model's code at the same stage
    assert next_step(r, model="m", device="neuron").failure == "model_error"
    assert worth_trying(r, "all") != []


def test_a_compile_failure_at_an_op_no_evidence_decides_is_its_own_class() -> None:
    r = rows(
        {
            "error_type": "RuntimeError",
            "failing_op": "aten::foo",
            "error_message": "x",
            "compile_evidence": "none",
        },
        at="compile",
    )
    assert classify(next_steps.deciding_row(r)).failure == "compile_no_evidence"
    r[3]["failing_op"] = None  # no op named: the model's own error, not a lowering
    assert classify(next_steps.deciding_row(r)).failure == "model_error"


OFFSETS = (
    "offs must be divisible by 128: the per-expert routing offsets [35, 56, 88, 128] "
    "(cumulative tokens per expert) are not (TorchNeuron's _grouped_mm precondition; "
    "TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1 skips it)"
)


def test_the_routing_precondition_says_it_is_not_the_tiny_size_and_what_full_size_meets() -> None:
    # gpt-oss: 4 experts per token at full size (the shrink kept 2); the device's class gives
    # the patterns that read its error text
    patterns = next(c.at_full_size for c in classes() if c.failure == "kernel_precondition")
    assert patterns is not None
    note = routed_rows_note(
        OFFSETS, {"num_experts_per_tok": 2}, {"num_experts_per_tok": [4, 2]}, patterns
    )
    assert note is not None
    assert note.startswith("not the tiny input's size: its 128 routed rows are a multiple of 128")
    assert "tokens x 4 rows (top-4), a multiple of 128 for any multiple of 32 tokens" in note
    assert "(35, 56, 88, 128 here)" in note and "blocked at full size as well" in note
    # the row count alone: what a full-size batch meets (top-8 -> 16 tokens)
    rows_only = "t must be divisible by 128, got 8 (the rows routed to the experts)"
    note = routed_rows_note(rows_only, {"text_config": {"num_experts_per_tok": 8}}, {}, patterns)
    assert note is not None and "the tiny input routed 8 rows" in note
    assert "a multiple of 128 for any multiple of 16 tokens" in note
    failure = {
        "error_type": "ValueError",
        "failing_op": "aten::_grouped_mm",
        "error_message": OFFSETS,
    }
    step = next_step(
        rows(failure),
        model="openai/gpt-oss-20b",
        device="neuron",
        config={"num_experts_per_tok": 4},
    )
    assert step.failure == "kernel_precondition"
    assert "TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1" in step.text
    assert step.at_full_size is not None and "top-4" in step.at_full_size


def test_a_step_run_with_another_implementation_is_proven() -> None:
    failure = {
        "error_type": "ValueError",
        "failing_op": "aten::_grouped_mm",
        "error_message": OFFSETS,
    }
    tried = [
        Alternative("experts_implementation=batched_mm", True, fallback_ops=1),
        Alternative("attn_implementation=eager", False, "forward", "aten::_grouped_mm"),
    ]
    step = next_step(
        rows(failure),
        model="openai/gpt-oss-20b",
        device="neuron",
        check="hfsweep check openai/gpt-oss-20b --device neuron",
        alternatives=tried,
    )
    assert step.proven == "experts_implementation=batched_mm"
    assert step.text.startswith("passes with experts_implementation='batched_mm' (run:")
    assert step.command == (
        "hfsweep check openai/gpt-oss-20b --device neuron "
        "--implementation experts_implementation=batched_mm"
    )
    assert step.tried == ("attn_implementation='eager' fails at forward (aten::_grouped_mm)",)
    assert tried[0].describe() == (
        "experts_implementation='batched_mm' passes every stage, 1 op falling back to the CPU"
    )
    # none passed: the class's own step, with what was tried
    step = next_step(rows(failure), model="m", device="neuron", alternatives=tried[1:])
    assert step.proven is None and step.failure == "kernel_precondition" and step.tried


def test_alternatives_table_rows_read_back_per_switch() -> None:
    table = [
        {"implementation": "experts_implementation=batched_mm", "stage": s, "status": "pass"}
        for s in STAGES
    ] + [
        {
            "implementation": "experts_implementation=eager",
            "stage": "load",
            "status": "pass",
        },
        {
            "implementation": "experts_implementation=eager",
            "stage": "forward",
            "status": "fail",
            "error_type": "RuntimeError",
            "error_message": "boom " * 30,
        },
    ]
    found = next_steps.alternatives_of(table)
    assert [a.passed for a in found] == [True, False]
    assert found[1].failed_stage == "forward" and found[1].failure.endswith("...")


def test_the_report_s_summary_row_classifies_as_the_stage_rows_do() -> None:
    failure = {"error_type": "HostArgumentError", "failing_op": "aten::x", "error_message": "m"}
    r = rows(failure)
    summary = {
        "failed_status": "fail",
        "failed_stage": "forward",
        "error_type": "HostArgumentError",
        "error_message": "m",
        "failing_op": "aten::x",
        "failed_evidence": None,
    }
    assert classify(next_steps.summary_row(summary)) == classify(next_steps.deciding_row(r))
    skip = {"skip_reason": "remote_code", "skip_message": "auto_map"}
    assert classify(next_steps.summary_row(skip)).failure == "remote_code"
    clean = {"unverified": False, "fallback_ops": 0}
    assert classify(next_steps.summary_row(clean)).failure == "passes"
    assert classify(next_steps.summary_row({"fallback_ops": 3})).failure == (
        "passes_with_fallbacks"
    )
    assert Status.PASS.value == "pass"


def test_the_docs_page_lists_every_class() -> None:
    from tests.conftest import ROOT

    page = (ROOT / "docs" / "next-steps.md").read_text()
    missing = [c.failure for c in classes() if f"| `{c.failure}` |" not in page]
    assert not missing, f"docs/next-steps.md lacks {missing}"


def test_a_tp_stage_without_a_plan_does_not_decide_a_models_next_step():
    """A model that passed every stage but a tp stage its library has no plan for is a pass,
    for the next step as for the verdict."""
    rows = [
        {"stage": "load", "status": "pass", "reason": None},
        {"stage": "tp", "status": "skip", "reason": SkipReason.NO_TP_PLAN.value},
    ]
    assert next_steps.deciding_row(rows)["status"] == Status.PASS.value


def test_a_device_s_classes_are_merged_before_the_class_they_name(tmp_path, monkeypatch) -> None:
    """A device's folder declares its classes; the table places each before the core class
    its `before` names, and one naming no class is refused (not silently dropped)."""
    import json

    table = tmp_path / "foo" / "data" / "next_steps.json"
    table.parent.mkdir(parents=True)
    foo = {
        "failure": "foo_kernel",
        "title": "t",
        "match": {"error_type": ["FooKernelError"]},
        "step": "s",
        "reason": "r",
        "before": "timeout",
    }
    table.write_text(json.dumps({"classes": [foo]}))
    monkeypatch.setattr(next_steps, "DEVICE_TABLES", tmp_path)
    classes.cache_clear()
    try:
        names = [c.failure for c in classes()]
        assert names[names.index("timeout") - 1] == "foo_kernel"
        assert "kernel_precondition" not in names  # only what the device folders declare
        assert classify({"status": "fail", "error_type": "FooKernelError"}).failure == "foo_kernel"
        table.write_text(json.dumps({"classes": [{**foo, "before": "no_such_class"}]}))
        classes.cache_clear()
        with pytest.raises(ValueError, match="no_such_class"):
            classes()
    finally:
        classes.cache_clear()
