"""The hf_training stages (trainer, trainer_compiled, sft, accelerate_ddp): Hugging Face's own
trainers on the emulated neuron device, found the way transformers and accelerate find it (the
stand-in `torch_neuronx` in that process only), where they trained, against the CPU; a trainer
that trained on the CPU is a fail of its own; a crash inside one is that stage's row."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys

import pytest

from ground.schema import Stage
from runners import faults
from runners import stages as stage_registry
from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.isolation import run_isolated
from runners.run_model import run_model
from runners.settings import ModelSettings
from sweep.commands.options import stage_list
from tests.neuron_support import forked
from tests.test_training_stages import tiny


@pytest.fixture(scope="module")
def qwen2():
    return tiny("qwen2", "Qwen2ForCausalLM")


def by_stage(outcome) -> dict:
    return {r.stage: r for r in outcome.stages}


def test_the_group_and_what_its_stages_build_on() -> None:
    assert [s.value for s in stage_list("hf_training")] == [
        "load",
        "forward",
        "backward",
        "trainer",
        "trainer_compiled",
        "sft",
        "accelerate_ddp",
    ]
    assert set(stage_registry.group_stages("hf_training")) <= set(stage_list("all"))
    assert all(
        stage_registry.stage_needs()[s] == (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)
        for s in stage_registry.group_stages("hf_training")
    )
    assert (
        Stage.ACCELERATE_DDP in stage_registry.rank_stages()
    )  # it runs on the distributed stages' rank group
    assert not set(stage_registry.group_stages("hf_training")) & set(stage_list("default"))


@forked
def test_trainer_and_sft_train_on_the_emulated_device_as_on_the_cpu(qwen2) -> None:
    from runners.devices.neuron.device import PACKAGE, real_neuron_installed

    assert PACKAGE not in sys.modules  # the default path never shows the stand-in
    device = NeuronEmulatedDevice()
    device.setup()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        outcome = run_model(
            qwen2,
            ModelSettings(
                device="neuron", stages=("load", "forward", "backward", "trainer", "sft")
            ),
            device=device,
        )
    assert "'loss'" not in printed.getvalue()  # stdout is the command's answer's
    rows = by_stage(outcome)
    for stage in ("trainer", "sft"):
        row = rows[stage]
        assert row.status == "pass", (stage, row.error_message)
        assert row.trained_on is not None and row.trained_on.startswith("neuron: "), row.trained_on
        assert row.max_abs_error is not None  # the losses and parameters met the CPU's
        assert "dataloader_pin_memory=False" in (row.hf_settings or "")
    assert "token ids" in (rows["sft"].hf_settings or "")
    # the stand-in is this process's alone, and it is not taken for TorchNeuron
    assert importlib.util.find_spec(PACKAGE) is not None
    assert not real_neuron_installed()
    from transformers import TrainingArguments

    assert TrainingArguments(output_dir="unused", report_to="none").device.type == "neuron"


@forked
def test_a_trainer_that_trained_on_the_cpu_fails_with_its_own_signature(qwen2, monkeypatch):
    """Without the stand-in, transformers finds no device and the Trainer trains on the CPU."""
    monkeypatch.setattr(NeuronEmulatedDevice, "present_to_libraries", lambda self: None)
    device = NeuronEmulatedDevice()
    device.setup()
    outcome = run_model(
        qwen2,
        ModelSettings(device="neuron", stages=("load", "forward", "backward", "trainer")),
        device=device,
    )
    row = by_stage(outcome)["trainer"]
    assert row.status == "fail"
    assert row.error_signature == "TrainedElsewhere: trained on cpu, not on neuron"
    assert row.trained_on is not None and row.trained_on.startswith("cpu: ")


@pytest.mark.parametrize(
    ("fault", "status", "after", "limits"),
    [
        ("segfault", "crash", "not_run", {"timeout_s": 120}),
        # a hang that started a process of its own first (the fault's `sleep` helper): the
        # deadline kills both; 12 s leaves the stages before it three times what they need
        ("spawn", "timeout", "not_run", {"timeout_s": 12}),
        # the allocation refused at the budget is the stage's; the process lives on (the next
        # stage, which does not build on trainer, would run: left out, it costs seconds)
        ("alloc", "oom", None, {"timeout_s": 120, "memory_limit": 2 << 30}),
    ],
)
def test_a_fault_inside_a_trainer_stage_is_that_stages_row(
    qwen2, monkeypatch, tmp_path, fault, status, after, limits
):
    """A trainer stage that crashes, hangs or runs past its memory budget is one row with
    that status, and nothing it started outlives the model's process."""
    from tests.kill_support import wait_dead

    state = tmp_path / "faults"
    monkeypatch.setenv(
        faults.ENV, json.dumps([{"at": "stage:trainer", "match": "*", "fault": fault}])
    )
    monkeypatch.setenv(faults.STATE_ENV, str(state))
    stages = ("load", "forward", "backward", "trainer", *(("sft",) if after else ()))
    outcome = run_isolated(qwen2, ModelSettings(device="cpu", stages=stages, **limits))
    got = {r.stage: r.status for r in outcome.stages}
    assert got == {
        "load": "pass",
        "forward": "pass",
        "backward": "pass",
        "trainer": status,
        **({"sft": after} if after else {}),
    }, [(r.stage, r.status, r.error_message) for r in outcome.stages]
    fired = faults.fired(str(state))
    helpers = [int(p.name.split("-")[1]) for p in state.glob("spawned-*")]
    assert fired and (helpers or fault != "spawn")
    assert all(wait_dead(pid) for pid in [*fired, *helpers])


def test_what_moving_to_a_device_undoes_is_named_as_the_librarys():
    """A move that makes new parameters (a PrivateUse1 device) unties weights and leaves an
    optimizer made before it on the old ones: each is said with the library function that
    would have had to fix it (cheap: two CPU modules standing for before and after)."""
    import copy

    import torch

    from runners.stages.hf_training.accelerate_ddp import prepared_problems
    from runners.stages.hf_training.trainers import TiesBroken, check_ties

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(4, 2)
            self.head = torch.nn.Linear(2, 4, bias=False)
            self.head.weight = self.embed.weight

    before = Tied()
    after = copy.deepcopy(before)
    check_ties(before, after)  # deepcopy keeps the tie
    after.head.weight = torch.nn.Parameter(after.embed.weight.detach().clone())
    with pytest.raises(TiesBroken, match="untied embed.weight and head.weight"):
        check_ties(before, after)
    optimizer = torch.optim.AdamW(before.parameters())
    (problem,) = prepared_problems(after, after, optimizer)
    assert problem[1] == "accelerate/accelerator.py:_get_parameters_to_remap"
    assert prepared_problems(before, before, optimizer) == []


COMPILED_FAILED = [
    *({"stage": s, "status": "pass"} for s in ("load", "forward", "backward")),
    {
        "stage": "trainer_compiled",
        "status": "fail",
        "error_type": "BackendCompilerFailed",
        "error_message": "backend='neuron' raised: RuntimeError: injected",
        "hf_settings": "dataloader_pin_memory=False; torch_compile_backend=neuron",
    },
]


def test_a_compiled_trainer_failure_names_the_backend_switch(qwen2) -> None:
    """The next step of a trainer_compiled failure names torch_compile_backend, and
    `--alternatives auto` runs its values other than the one the stage used; a failure of a
    stage the switch does not change runs none of it (cheap: no model runs)."""
    from ground.next_steps import next_step
    from runners.alternatives import candidates, worth_trying
    from runners.switches import trainer_arguments

    assert worth_trying(COMPILED_FAILED, "auto") == ["torch_compile_backend"]
    assert candidates(qwen2, COMPILED_FAILED, "auto") == [
        "torch_compile_backend=eager",
        "torch_compile_backend=aot_eager",
    ]
    trainer = [*COMPILED_FAILED[:3], {**COMPILED_FAILED[3], "stage": "trainer"}]
    assert not any(c.startswith("torch_compile_backend") for c in candidates(qwen2, trainer, "all"))
    # a compiled step whose losses differ from the eager CPU trainer's asks the same question
    accuracy = [*COMPILED_FAILED[:3], {**COMPILED_FAILED[3], "status": "fail_accuracy"}]
    assert worth_trying(accuracy, "auto") == ["torch_compile_backend"]
    step = next_step(COMPILED_FAILED, model="org/m", device="neuron")
    assert step.failure == "trainer_compile_backend" and "torch_compile_backend" in step.text
    assert step.command is not None
    assert step.command.endswith("--implementation torch_compile_backend=eager")
    assert trainer_arguments("torch_compile_backend=aot_eager") == {
        "torch_compile_backend": "aot_eager"
    }
    assert trainer_arguments("attn_implementation=eager") == {}  # the model's own code's
    # check refuses the switch where no stage it changes runs (exit 2, a usage error)
    from ground.errors import UsageError
    from sweep.commands.check import _known_switch

    _known_switch(qwen2, "torch_compile_backend=eager", ["load", "trainer_compiled"])
    with pytest.raises(UsageError, match="changes trainer_compiled only"):
        _known_switch(qwen2, "torch_compile_backend=eager", ["load", "trainer"])


@forked
def test_the_compiled_trainer_passes_with_the_eager_backend_where_its_own_fails(
    qwen2, monkeypatch, tmp_path
) -> None:
    """The emulated device's backend made to fail each graph (a test fault at
    `backend:neuron`): trainer_compiled fails with the backend transformers picked, and the
    alternative run with torch_compile_backend=eager (the same process here, to keep it cheap)
    trains the captured step on the device and passes, so aot_eager (the switch's next value)
    is not run; the next step says it is proven."""
    from ground.next_steps import alternatives_of, next_step
    from runners.alternatives import try_alternatives

    monkeypatch.setenv(
        faults.ENV, json.dumps([{"at": "backend:neuron", "match": "*", "fault": "raise"}])
    )
    monkeypatch.setenv(faults.STATE_ENV, str(tmp_path))
    device = NeuronEmulatedDevice()
    device.setup()
    settings = ModelSettings(
        device="neuron", stages=("load", "forward", "backward", "trainer_compiled")
    )
    default = run_model(qwen2, settings, device=device)
    row = by_stage(default)["trainer_compiled"]
    assert row.status == "fail" and "injected" in (row.error_message or ""), row.error_message
    assert "torch_compile_backend=neuron" in (row.hf_settings or "")
    ran: list[str] = []
    tried = try_alternatives(
        qwen2,
        settings,
        default,
        run=lambda spec, s: run_model(spec, s, device=device),
        on_try=ran.append,
    )
    assert ran == ["torch_compile_backend=eager"]
    assert tried[0].passed, [(s.stage, s.status, s.error_message) for s in tried[0].stages]
    compiled = by_stage(tried[0])["trainer_compiled"]
    assert "torch_compile_backend=eager" in (compiled.hf_settings or "")
    assert (compiled.trained_on or "").startswith("neuron: ")
    assert compiled.max_abs_error is not None  # against the eager CPU trainer
    rows = [{**s.row(), "implementation": a.implementation} for a in tried for s in a.stages]
    step = next_step(
        [s.row() for s in default.stages],
        model="org/m",
        device="neuron",
        alternatives=alternatives_of(rows),
    )
    assert step.proven == "torch_compile_backend=eager"
    assert step.text.startswith("passes with torch_compile_backend='eager'")
