"""The training stages (optimizer, optimizer_fused, amp, lora) on the CPU and on the emulated
neuron device: rows, fallbacks split by where they happened, numerics against the CPU, the
autocast policy TorchNeuron registers, LoRA's applicability, and what builds on what."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ground.errors import UsageError
from ground.schema import Stage
from model_configs.resolve import transformers_default_config
from model_configs.shrink import shrink
from model_configs.spec import ResolvedConfig
from runners import stages as stage_registry
from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.run_model import run_model as run_with_settings
from runners.settings import ModelSettings
from runners.stages import engine
from runners.stages.core import backward
from runners.stages.core import compile as compile_stage
from runners.stages.training import steps as training
from sweep.commands.options import stage_list
from tests.neuron_support import forked

TRAIN = ["load", "forward", "backward", "optimizer", "optimizer_fused", "amp", "lora"]
ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "runners" / "devices" / "neuron" / "data" / "profiles"


def tiny(model_type: str, arch: str | None = None):
    resolved = ResolvedConfig(
        model_id=f"test/{model_type}",
        library="transformers",
        config=transformers_default_config(model_type),
        source="transformers_default",
    )
    return shrink(resolved, architecture_hint=arch)


@pytest.fixture(scope="module")
def llama():
    return tiny("llama", "LlamaForCausalLM")


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test


def run_model(spec, *, device="cpu", **settings):
    """`run_model` with the settings as keywords; `device`: a name, or a device set up here."""
    if isinstance(device, str):
        return run_with_settings(spec, ModelSettings(device=device, **settings))
    return run_with_settings(spec, ModelSettings(device=device.name, **settings), device=device)


def by_stage(outcome) -> dict:
    return {r.stage: r for r in outcome.stages}


def test_stage_selection_groups_and_default() -> None:
    assert stage_list(None) == list(stage_registry.default_stages())
    assert [s.value for s in stage_list("training")] == [
        "load",
        "forward",
        "backward",
        "optimizer",
        "optimizer_fused",
        "amp",
        "lora",
    ]
    assert stage_list("lora,load,backward,forward,lora") == [
        Stage.LOAD,
        Stage.FORWARD,
        Stage.BACKWARD,
        Stage.LORA,
    ]
    assert stage_list("all") == list(Stage)
    with pytest.raises(UsageError, match="unknown stage 'adamw'.*training"):
        stage_list("load,adamw")
    assert all(
        stage_registry.stage_needs()[s] == (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)
        for s in stage_registry.group_stages("training")
    )


def test_fallback_rows_split_by_where_the_op_fell_back() -> None:
    """An op seen only in the optimizer's part of a step is `optimizer`; one that also fell
    back in the step's forward or backward stays `eager` (one row per stage and op)."""
    from runners.devices.base import FallbackLog

    stage_log, step_log = FallbackLog(), FallbackLog()
    for log in (stage_log, step_log):
        log.record("aten::lerp.Scalar_out", n=5, bytes_d2h=10)
        log.record("aten::stack", n=1)
    stage_log.record("aten::stack", n=2)  # the model's forward too
    stage_log.record("aten::histc", n=3)
    from runners.devices import get_device

    rows = engine._fallback_rows(stage_log, get_device("cpu"), step_log)
    assert [(r["op"], r["count"], r["source"]) for r in rows] == [
        ("aten::histc", 3, "eager"),
        ("aten::lerp.Scalar_out", 5, "optimizer"),
        ("aten::stack", 3, "eager"),
    ]


def test_training_stages_pass_on_cpu(llama, monkeypatch) -> None:
    """Each passes; and each training stage starts from the loaded weights: one stage's steps
    leave nothing behind for the next (each compares equal to its own CPU reference)."""
    seen = []
    real = training.fresh_copies

    def spy(ctx):
        model, reference = real(ctx)
        seen.append(torch.cat([p.detach().flatten() for p in model.parameters()]).clone())
        return model, reference

    monkeypatch.setattr(training, "fresh_copies", spy)
    rows = by_stage(run_model(llama, device="cpu", stages=TRAIN))
    assert {s: r.status for s, r in rows.items()} == dict.fromkeys(TRAIN, "pass")
    for stage in ("optimizer", "optimizer_fused", "amp", "lora"):
        assert rows[stage].duration_s > 0 and rows[stage].fallbacks == []
        assert rows[stage].step_op_calls is None  # the CPU counts no calls
    # optimizer, optimizer_fused and amp (lora wraps a copy of its own with peft)
    assert len(seen) == 3 and all(torch.equal(seen[0], copy) for copy in seen[1:])


def test_training_stages_build_on_backward_not_on_compile(llama, monkeypatch) -> None:
    def broken(self, ctx):
        raise RuntimeError("the backend could not lower aten::foo")

    monkeypatch.setattr(compile_stage.CompileStage, "run", broken)
    stages = ["load", "forward", "backward", "compile", "generate", "optimizer", "lora"]
    rows = by_stage(run_model(llama, device="cpu", stages=stages))
    assert rows["compile"].status == "fail" and rows["generate"].status == "not_run"
    assert rows["optimizer"].status == "pass" and rows["lora"].status == "pass"

    monkeypatch.setattr(training.OptimizerStage, "train", broken)  # nothing builds on it
    rows = by_stage(run_model(llama, device="cpu", stages=stages))
    assert rows["optimizer"].status == "fail" and rows["lora"].status == "pass"

    monkeypatch.setattr(backward.BackwardStage, "run", broken)
    rows = by_stage(run_model(llama, device="cpu", stages=stages))
    assert rows["optimizer"].status == "not_run"
    assert rows["optimizer"].error_message == "backward did not pass"


def test_skips_without_peft_or_a_fused_adamw(llama, monkeypatch) -> None:
    """No peft: the lora stage is a missing_package skip naming the extra. A device PyTorch
    has no fused AdamW for: optimizer_fused is a device_unsupported_feature skip."""
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    monkeypatch.setattr(training, "fused_adamw_devices", lambda: ["cuda"])
    rows = by_stage(run_model(llama, device="cpu", stages=TRAIN[:3] + ["optimizer_fused", "lora"]))
    assert (rows["lora"].status, rows["lora"].reason) == ("skip", "missing_package")
    assert "bash scripts/install.sh all,training" in rows["lora"].error_message
    fused = rows["optimizer_fused"]
    assert (fused.status, fused.reason) == ("skip", "device_unsupported_feature")
    assert fused.error_message == "PyTorch has no fused AdamW for device type 'cpu'"


def test_lora_is_not_applicable_where_peft_has_no_defaults() -> None:
    pytest.importorskip("peft")
    distilbert = tiny("distilbert", "DistilBertForMaskedLM")
    assert "distilbert" not in training.lora_target_modules()
    rows = by_stage(
        run_model(distilbert, device="cpu", stages=["load", "forward", "backward", "lora"])
    )
    assert rows["lora"].status == "skip" and rows["lora"].reason == "not_applicable"
    assert rows["lora"].error_message == (
        "peft has no default LoRA target modules for model type 'distilbert'"
    )


def test_amp_is_not_applicable_to_a_bf16_run(llama) -> None:
    rows = by_stage(run_model(llama, device="cpu", dtype="bf16", stages=TRAIN[:3] + ["amp"]))
    assert rows["amp"].status == "skip" and rows["amp"].reason == "not_applicable"
    assert "this run's dtype is bfloat16" in rows["amp"].error_message


def test_autocast_policy_matches_the_installed_aten_lists() -> None:
    """The bundled policy's op lists are ATen's (autocast_mode.h of this torch), so a torch
    whose lists moved is caught here; the extraction script reads the same header."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "extract_autocast_policy",
        ROOT / "scripts" / "extract_autocast_policy.py",
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    header_path, _ = module.installed_header()
    lists = module.op_lists(header_path.read_text())
    from runners.autocast_policy import CastPolicy, load_policy
    from runners.devices.neuron.autocast import POLICY_FILE

    policy = load_policy(POLICY_FILE)
    macros = {
        CastPolicy.LOWER_PRECISION_FP: "AT_FORALL_LOWER_PRECISION_FP",
        CastPolicy.FP32: "AT_FORALL_FP32",
        CastPolicy.FP32_SET_OPT_DTYPE: "AT_FORALL_FP32_SET_OPT_DTYPE",
        CastPolicy.FP32_APPEND_DTYPE: "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE",
        CastPolicy.PROMOTE: "AT_FORALL_PROMOTE",
    }
    for kind, macro in macros.items():
        assert [op for op, k in policy.items() if k is kind] == [op for op, _, _ in lists[macro]]
    assert policy["aten::binary_cross_entropy"] is CastPolicy.BANNED
    assert policy["aten::mm"] is CastPolicy.LOWER_PRECISION_FP
    assert policy["aten::softmax.int"] is CastPolicy.FP32_SET_OPT_DTYPE


def test_amp_reference_applies_the_device_policy_on_the_cpu() -> None:
    """The amp stage's CPU reference casts what the device casts: under the policy `exp` and
    `sum` of a bf16 tensor run in float32 (the CPU's own autocast leaves them bf16), `mm` in
    bf16, and binary_cross_entropy is banned; on exit the CPU's own autocast is back."""
    from runners import autocast_policy

    x = torch.rand(4, 4).to(torch.bfloat16)
    with autocast_policy.on_cpu(torch.bfloat16, NeuronEmulatedDevice().autocast_policy_file()):
        assert torch.exp(x).dtype == torch.float32 and x.sum().dtype == torch.float32
        assert torch.mm(x.float(), x.float()).dtype == torch.bfloat16
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(x.float().sigmoid(), x.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.exp(x).dtype == torch.bfloat16 and x.sum().dtype == torch.bfloat16


@forked
def test_emulated_autocast_follows_torchneurons_policy(neuron: NeuronEmulatedDevice) -> None:
    """PyTorch's own autocast test lists (what the snapshot's tests/autocast runs on neuron):
    lower-precision ops give bf16, fp32 ops float32, promote ops the widest type; and
    binary_cross_entropy raises under autocast, as TorchNeuron's kernel does."""
    from torch.testing._internal.autocast_test_lists import AutocastTestLists

    lists = AutocastTestLists(torch.device("neuron:0"))
    skip = {"_convolution", "cudnn_convolution", "cudnn_convolution_transpose", "einsum"}
    skip |= {"lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell"}  # the snapshot's too
    cases = [(e[0], e[1], {}, torch, torch.bfloat16) for e in lists.torch_fp16 if e[0] not in skip]
    cases += [
        (e[0], e[1], e[2] if len(e) > 2 else {}, torch, torch.float32) for e in lists.torch_fp32
    ]
    cases += [(e[0], e[1], {}, torch._C._nn, torch.bfloat16) for e in lists.nn_fp16]
    cases += [(e[0], e[1], {}, torch._C._nn, torch.float32) for e in lists.nn_fp32]
    checked = 0
    for op, args, kwargs, module, want in cases:
        with torch.autocast("neuron", dtype=torch.bfloat16):
            out = getattr(module, op)(*args, **kwargs)
        out = out if isinstance(out, torch.Tensor) else out[0]
        assert out.dtype == want, (op, out.dtype)
        checked += 1
    for op, args, *_ in lists.torch_need_autocast_promote:  # fp16 and fp32 inputs: float32
        with torch.autocast("neuron", dtype=torch.float16):
            out = getattr(torch, op)(*args)
        assert out.dtype == torch.float32, op
        checked += 1
    assert checked > 80
    x = torch.rand(3, device="neuron")
    with (
        torch.autocast("neuron", dtype=torch.bfloat16),
        pytest.raises(RuntimeError, match="unsafe to autocast"),
    ):
        torch.nn.functional.binary_cross_entropy(x, x)
    outside = torch.nn.functional.linear(x.reshape(1, 3), torch.ones(2, 3, device="neuron"))
    assert outside.dtype == torch.float32  # autocast off: nothing cast


@forked
def test_training_stages_on_neuron(neuron: NeuronEmulatedDevice, llama) -> None:
    """Under TorchNeuron's registrations the tiny Llama trains on the device with no CPU
    fallback, its state within tolerance of the CPU's; the default AdamW runs its foreach ops
    through PyTorch's per-tensor kernels (native), so it dispatches many more device ops per
    step than `fused=True` (one `_fused_adamw_`)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Dtypes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: dict[str, set] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.device.type == "neuron":
                self.seen.setdefault(str(func), set()).add(first.dtype)
            return func(*args, **(kwargs or {}))

    mode = Dtypes()
    with mode:
        rows = by_stage(run_model(llama, device=neuron, stages=TRAIN))
    assert {s: r.status for s, r in rows.items()} == dict.fromkeys(TRAIN, "pass")
    for stage in TRAIN[3:]:
        assert rows[stage].fallback_op_count == 0, rows[stage].fallbacks
    assert rows["optimizer"].max_abs_error is not None
    assert rows["optimizer"].step_op_calls > 5 * rows["optimizer_fused"].step_op_calls
    # the amp stage ran the matmuls in bf16 and the loss's log_softmax in float32
    assert torch.bfloat16 in mode.seen["aten.mm.default"]
    assert mode.seen["aten._log_softmax.default"] == {torch.float32}


@forked
def test_fused_adamw_with_a_grad_scaler_runs_on_the_cpu(neuron: NeuronEmulatedDevice) -> None:
    """TorchNeuron's `_fused_adamw_` declines `grad_scale` / `found_inf` (what a GradScaler
    hands AdamW): that step falls back to the CPU; without them it runs on the device."""
    p = torch.ones(4, device="neuron", requires_grad=True)
    p.grad = torch.full((4,), 0.5, device="neuron")
    optimizer = torch.optim.AdamW([p], fused=True)
    with neuron.record_fallbacks() as log:
        optimizer.step()
    assert "aten::_fused_adamw_" not in log.ops and log.executed["aten::_fused_adamw_"] == 1
    optimizer.grad_scale = torch.ones((), device="neuron")
    optimizer.found_inf = torch.zeros((), device="neuron")
    with neuron.record_fallbacks() as log:
        optimizer.step()
    assert log.ops["aten::_fused_adamw_"].count == 1
    assert log.declined["aten::_fused_adamw_"] == "grad_scale / found_inf are not supported"


@forked
def test_default_adamw_falls_back_where_fused_does_not(
    neuron: NeuronEmulatedDevice, llama, tmp_path
) -> None:
    """A device without `lerp` (TorchNeuron's registrations less lerp): PyTorch's default AdamW
    (foreach: `_foreach_lerp_` runs as per-tensor `lerp_`) falls back in its step, recorded as
    an optimizer-step fallback; `fused=True` (one `_fused_adamw_`) does not."""
    native = (PROFILES / "torchneuron-2026-04-21" / "native-ops.txt").read_text().splitlines()
    profile = tmp_path / "no-lerp.txt"
    profile.write_text("\n".join(op for op in native if "lerp" not in op) + "\n")
    device = NeuronEmulatedDevice(profile=str(profile))
    device.setup()
    rows = by_stage(run_model(llama, device=device, stages=TRAIN[:5]))
    assert rows["backward"].fallback_op_count == 0
    default, fused = rows["optimizer"], rows["optimizer_fused"]
    assert default.status == fused.status == "pass"
    assert [(f["op"], f["source"]) for f in default.fallbacks] == [
        ("aten::lerp.Scalar_out", "optimizer")
    ]
    assert default.fallbacks[0]["count"] > 0 and default.fallbacks[0]["bytes_d2h"] > 0
    assert fused.fallbacks == [] and fused.fallback_op_count == 0
