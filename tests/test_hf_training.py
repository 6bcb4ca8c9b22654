"""The hf_training stages (trainer, trainer_compiled, sft, accelerate_ddp): Hugging Face's own
trainers on the emulated neuron device, found the way transformers and accelerate find it (the
stand-in `torch_neuronx` in that process only), where they trained, against the CPU; a trainer
that trained on the CPU is a fail of its own; a crash inside one is that stage's row."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from ground.schema import HF_TRAINING_STAGES, RANK_STAGES, STAGE_NEEDS, Stage
from runners import faults
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
    assert set(HF_TRAINING_STAGES) <= set(stage_list("all"))
    assert all(
        STAGE_NEEDS[s] == (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD) for s in HF_TRAINING_STAGES
    )
    assert Stage.ACCELERATE_DDP in RANK_STAGES  # it runs on the distributed stages' rank group
    assert not set(HF_TRAINING_STAGES) & set(stage_list("default"))


@forked
def test_trainer_and_sft_train_on_the_emulated_device_as_on_the_cpu(qwen2) -> None:
    from runners.devices.neuron.device import PACKAGE, real_neuron_installed

    assert PACKAGE not in sys.modules  # the default path never shows the stand-in
    device = NeuronEmulatedDevice()
    device.setup()
    outcome = run_model(
        qwen2,
        ModelSettings(device="neuron", stages=("load", "forward", "backward", "trainer", "sft")),
        device=device,
    )
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


def test_a_crash_inside_a_trainer_stage_is_that_stages_crash(qwen2, monkeypatch, tmp_path):
    monkeypatch.setenv(
        faults.ENV, json.dumps([{"at": "stage:trainer", "match": "*", "fault": "segfault"}])
    )
    monkeypatch.setenv(faults.STATE_ENV, str(tmp_path / "faults"))
    stages = ("load", "forward", "backward", "trainer", "sft")
    outcome = run_isolated(qwen2, ModelSettings(device="cpu", stages=stages, timeout_s=120))
    status = {r.stage: r.status for r in outcome.stages}
    assert status == {
        "load": "pass",
        "forward": "pass",
        "backward": "pass",
        "trainer": "crash",
        "sft": "not_run",
    }


def test_what_moving_to_a_device_undoes_is_named_as_the_librarys():
    """A move that makes new parameters (a PrivateUse1 device) unties weights and leaves an
    optimizer made before it on the old ones: each is said with the library function that
    would have had to fix it (cheap: two CPU modules standing for before and after)."""
    import copy

    import torch

    from runners.distributed.accelerate_ddp import prepared_problems
    from runners.hf_training import TiesBroken, check_ties

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
