"""The fault model on the emulated neuron device: what the device refuses is the model's own
`fail` naming the op, what the environment does is an `EnvironmentFault` (a retry, no row), and
the test-only fault hook reaches neuron children as it reaches cpu ones.

Each test runs in a clean child (`@forked`): a process that installs the neuron backend, or ran
a CPU backward before forking, cannot fork model children that use it.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from ground.errors import EnvironmentFault, is_environment_error
from runners import faults
from runners.isolation import run_isolated
from runners.settings import DeviceChoice, ModelSettings
from tests.neuron_support import forked
from tests.test_runner import tiny

STAGES = ["load", "forward", "backward"]


def _inject(*rules: dict) -> None:
    """Set the hook's rules in this (throwaway, forked) test process and its children."""
    os.environ[faults.ENV] = json.dumps(list(rules))
    os.environ[faults.STATE_ENV] = tempfile.mkdtemp(prefix="faults-")


def _statuses(outcome) -> dict[str, str]:
    return {r.stage: r.status for r in outcome.stages}


def test_the_devices_refusals_are_the_models_results():
    from runners.devices.base import FallbackDisallowed
    from runners.devices.neuron.compiler import UnlowerableOpError
    from runners.preflight import DeviceCheckError

    assert not is_environment_error(FallbackDisallowed(op="aten::digamma.out"))
    assert not is_environment_error(UnlowerableOpError(op="aten::clone"))
    assert is_environment_error(DeviceCheckError("the device is gone", device="neuron"))


@forked
def test_a_neuron_device_failing_to_set_up_in_the_child_is_the_environment() -> None:
    _inject({"at": "setup", "match": "llama", "fault": "env"})
    with pytest.raises(EnvironmentFault, match="DeviceError"):
        run_isolated(
            tiny("llama", "LlamaForCausalLM"), ModelSettings(device="neuron", stages=STAGES)
        )


@forked
def test_a_segfault_on_neuron_is_a_crash_of_that_stage() -> None:
    _inject({"at": "stage:forward", "match": "llama", "fault": "segfault"})
    outcome = run_isolated(
        tiny("llama", "LlamaForCausalLM"),
        ModelSettings(device="neuron", stages=STAGES, timeout_s=120),
    )
    assert _statuses(outcome) == {"load": "pass", "forward": "crash", "backward": "not_run"}
    assert "SIGSEGV" in outcome.stages[1].error_message


@forked
def test_strict_refusal_on_neuron_is_a_fail_row_naming_the_op() -> None:
    """Strict mode's refused fallback is raised in the child's stage: a `fail` row, not a retry."""
    outcome = run_isolated(
        tiny("llama", "LlamaForCausalLM"),
        ModelSettings(
            device=DeviceChoice("neuron", strict=True, profile="torch-mlir"),
            stages=STAGES,
            timeout_s=120,
        ),
    )
    failed = [r for r in outcome.stages if r.status == "fail"]
    assert failed, _statuses(outcome)
    assert failed[0].error_type == "FallbackDisallowed"
    assert failed[0].failing_op and failed[0].failing_op.startswith("aten::")
    assert failed[0].failing_op in failed[0].error_message


@pytest.mark.slow
@forked
def test_an_unlowerable_graph_op_is_a_compile_fail_row_not_a_retry() -> None:
    """TorchNeuron's raise mode on a graph op its compile path raises on (a boolean-mask
    `index_put`, planted in a tiny Llama's forward: the forked model process inherits the
    patch): the model's `fail`, naming the op and its evidence."""
    import torch
    from transformers import LlamaForCausalLM

    original = LlamaForCausalLM.forward

    def planted(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        mask = out.logits[..., 0] > 0
        out.logits = out.logits.index_put(
            (mask,), torch.zeros(out.logits.shape[-1]).to(mask.device)
        )
        return out

    LlamaForCausalLM.forward = planted
    outcome = run_isolated(
        tiny("llama", "LlamaForCausalLM"),
        ModelSettings(
            device=DeviceChoice("neuron", compile_mode="raise"),
            stages=["load", "compile"],
            timeout_s=300,
        ),
    )
    compiled = outcome.stages[1]
    assert compiled.status == "fail", _statuses(outcome)
    assert compiled.error_type == "UnlowerableOpError"
    assert (
        compiled.failing_op == "aten::index_put" and "cannot be lowered" in compiled.error_message
    )
    assert compiled.compile_evidence == "raises"


def test_a_resume_with_another_compile_mode_is_refused(tmp_path):
    """The neuron compile mode (raise / eager) changes every compile row: a resume must match."""
    from ground.errors import UsageError
    from sweep.driver import run_sweep
    from tests.conftest import write_catalog
    from tests.test_driver_faults import MODELS, config, passing

    catalog = write_catalog(tmp_path / "catalog.csv", MODELS)
    store = tmp_path / "store"
    run_sweep(config(store, catalog, top=2, device="neuron"), run_fn=passing)
    eager = config(store, catalog, top=4, device="neuron", device_options={"compile_mode": "eager"})
    with pytest.raises(UsageError, match=r"other settings: .*\bcompile_mode=raise \(now eager\)"):
        run_sweep(eager, run_fn=passing)
    run_sweep(config(store, catalog, top=4, device="neuron"), run_fn=passing)  # the same: goes on
