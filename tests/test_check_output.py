"""What `hfsweep check` says besides its table: the verdict line, the next step, and its
progress stage by stage (pure functions and the progress printer; the command itself runs in
tests/test_cli.py)."""

from __future__ import annotations

import io
import time

from ground import fmt
from sweep import verdict
from sweep.stage_progress import StageProgress

STAGES = ["load", "forward", "backward", "compile", "generate"]


def rows(statuses: list[str], **at: dict) -> list[dict]:
    """Stage rows with these statuses; `at` adds columns to one stage's row."""
    out = []
    for stage, status in zip(STAGES, statuses, strict=True):
        row = {
            "stage": stage,
            "status": status,
            "reason": None,
            "error_type": None,
            "error_message": None,
            "failing_op": None,
            "compile_mode": "raise",
            "fallback_op_count": 0,
        }
        row.update(at.get(stage, {}))
        out.append(row)
    return out


UNLOWERABLE = {
    "error_type": "UnlowerableOpError",
    "error_message": "aten::_native_batch_norm_legit_no_training cannot be lowered by the neuron "
    "compiler; TorchNeuron raises when a graph fails to compile "
    "(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1, its released default)",
    "failing_op": "aten::_native_batch_norm_legit_no_training",
}


def test_a_failure_names_its_stage_and_op_and_the_next_step_is_eager_compile() -> None:
    r = rows(["pass", "pass", "pass", "fail", "not_run"], compile=UNLOWERABLE)
    assert verdict.verdict(r) == "fails at compile: aten::_native_batch_norm_legit_no_training"
    assert verdict.error_line(r[3]).startswith("UnlowerableOpError: aten::_native_batch_norm")
    assert "=1, its released default)" in verdict.error_line(r[3])  # the real text, numbers kept
    step = verdict.next_step(r, model="timm/resnet50.a1_in1k", device="neuron")
    assert step is not None
    assert (
        step.command == "hfsweep check timm/resnet50.a1_in1k --device neuron --compile-mode eager"
    )
    assert step.failure == "compile_unlowerable" and "op by op" in step.text
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION" in step.why
    # eager mode already: no eager to suggest, the op needs a lowering (still a step)
    eager = rows(
        ["pass"] * 3 + ["fail", "not_run"], compile={**UNLOWERABLE, "compile_mode": "eager"}
    )
    step = verdict.next_step(eager, model="m", device="neuron")
    assert step.failure == "compile_unlowerable_eager" and step.command is None
    assert "needs a lowering for aten::_native_batch_norm_legit_no_training" in step.text
    assert not verdict.passed(eager)


def test_a_failure_without_an_op_shows_its_error_cut_at_a_word() -> None:
    message = "t must be divisible by 128, got 64 " + "and then much more text " * 20
    r = rows(
        ["pass", "fail", "not_run", "not_run", "not_run"],
        forward={"error_type": "ValueError", "error_message": message},
    )
    line = verdict.verdict(r)
    assert line.startswith("fails at forward: ValueError: t must be divisible by 128, got 64")
    assert line.endswith("…") and len(line) <= len("fails at forward: ValueError: ") + 160
    assert line[:-1].endswith(("text", "then", "much", "more", "and"))  # never inside a word


def test_timeouts_and_strict_get_their_own_next_step() -> None:
    r = rows(
        ["pass", "timeout", "not_run", "not_run", "not_run"],
        forward={"error_type": "Timeout", "error_message": "forward did not finish within 600 s"},
    )
    assert verdict.verdict(r).startswith("fails at forward (timeout): Timeout: forward did not")
    step = verdict.next_step(r, model="org/m x", device="cpu", timeout_s=600)
    assert (
        step is not None and step.command == "hfsweep check 'org/m x' --device cpu --timeout 1200"
    )
    strict = rows(
        ["pass", "fail", "not_run", "not_run", "not_run"],
        forward={"error_type": "FallbackDisallowed", "failing_op": "aten::histc"},
    )
    step = verdict.next_step(strict, model="m", device="neuron")
    assert step.command is not None and "--strict" not in step.command
    assert "without --strict" in step.text


def test_passing_and_skips() -> None:
    na = {"reason": "not_applicable", "error_message": "generate does not apply to BertModel"}
    r = rows(["pass"] * 4 + ["skip"], generate=na)
    assert verdict.passed(r)
    assert verdict.verdict(r) == (
        "passes every stage (load, forward, backward, compile; generate does not apply), "
        "with no CPU fallback"
    )
    fallbacks = [{"op": "aten::histc"}, {"op": "aten::argmax"}, {"op": "aten::histc"}]
    assert verdict.verdict(r, fallbacks).endswith(
        "with CPU fallbacks (2 ops: aten::argmax, aten::histc)"
    )
    missing = {
        "reason": "missing_package",
        "error_message": "timm models need the timm package, which is not installed: "
        "pip install 'hfsweep[timm]'",
    }
    skipped = rows(["skip"] * 5, **{s: missing for s in STAGES})
    assert verdict.verdict(skipped).startswith("skipped (missing_package): timm models need")
    step = verdict.next_step(skipped, model="timm/x", device="cpu")
    # a row written before the locked route: its pip install of an extra becomes install.sh's
    assert step is not None and step.command == "bash scripts/install.sh all,timm"
    remote = {"reason": "remote_code", "error_message": "the repo needs trust_remote_code"}
    step = verdict.next_step(
        rows(["skip"] * 5, **{s: remote for s in STAGES}), model="m", device="cpu"
    )
    assert step.failure == "remote_code" and step.command is None
    assert "trust_remote_code" in step.text
    device_skip = {"reason": "device_unsupported_feature", "error_message": "no fp16 here"}
    partial = rows(["pass"] * 4 + ["skip"], generate=device_skip)
    assert not verdict.passed(partial)
    assert "generate (device_unsupported_feature) skipped" in verdict.verdict(partial)


def _wait_for_text(stream: io.StringIO, text: str) -> None:
    """Until the progress thread wrote `text` (its timing is the thread's, not the test's)."""
    deadline = time.monotonic() + 600  # a guard against a hang, not a speed
    while text not in stream.getvalue():
        assert time.monotonic() < deadline, f"never written: {text!r}"
        time.sleep(0.05)


def test_progress_off_a_terminal_prints_a_line_per_stage_and_a_heartbeat() -> None:
    stream = io.StringIO()
    with StageProgress(stream=stream, interactive=False, heartbeat_s=1.0) as progress:
        progress.phase("setting up neuron and running load")
        progress.stage_done({"stage": "load", "status": "pass", "duration_s": 0.42}, "forward")
        assert progress.phase_text == "running forward"
        _wait_for_text(stream, "[check] still running forward (")  # it wakes once a second
        progress.stage_done(
            {"stage": "forward", "status": "fail", "duration_s": 3.0, **UNLOWERABLE}, None
        )
    out = stream.getvalue().splitlines()
    # a phase is announced when it starts (a pipe never waits in silence), a stage's own start
    # is not (its result line follows)
    assert out[0] == "[check] setting up neuron and running load ..."
    assert out[1] == "[check] load       pass            0.42 s"
    assert "[check] running forward ..." not in out
    assert any(line.startswith("[check] still running forward (") for line in out)
    assert out[-1].startswith("[check] forward    fail            3.00 s  aten::_native_batch")


def test_progress_on_a_terminal_draws_a_spinner_and_keeps_the_stage_lines() -> None:
    stream = io.StringIO()
    with StageProgress(stream=stream, interactive=True) as progress:
        progress.phase("loading torch and the device")
        _wait_for_text(stream, "loading torch and the device")  # redrawn four times a second
        progress.stage_done({"stage": "load", "status": "pass", "duration_s": 0.1}, "forward")
    text = stream.getvalue()
    assert "loading torch and the device" in text  # the live line was drawn
    assert "load       pass            0.10 s" in text  # the stage line stays
    assert progress.lines == ["load       pass            0.10 s"]


def test_clip_cuts_at_word_boundaries() -> None:
    assert fmt.clip("its released default", 100) == "its released default"
    assert (
        fmt.clip("TorchNeuron raises when its released default", 30)
        == "TorchNeuron raises when its…"
    )
    assert fmt.clip("a " + "x" * 50, 20) == "a " + "x" * 17 + "…"  # one long word: cut inside it
    assert fmt.first_line("\n\n  first   line \nsecond") == "first line"
    assert fmt.byte_size(1536) == "1.50 KiB" and fmt.byte_size(3 * 2**30) == "3.00 GiB"
    assert fmt.seconds(0.042) == "0.04 s" and fmt.seconds(83.24) == "83.2 s"
