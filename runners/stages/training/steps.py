"""The training stages: fine-tuning as users write it, on the device, stage by stage.

- `optimizer`: two training steps (forward, loss, backward, `clip_grad_norm_`, `AdamW.step()`,
  `zero_grad()`) with PyTorch's default AdamW for the device (foreach on an accelerator, the
  for-loop on the CPU);
- `optimizer_fused`: the same with `AdamW(fused=True)`, where PyTorch has a fused kernel for
  the device;
- `amp`: one step under `torch.autocast(device_type, dtype=torch.bfloat16)` (fp32 weights);
- `lora`: peft's LoRA with its default target modules for the model type, only the adapter
  parameters trainable, one step; every LoRA matrix must get a finite gradient.

Each stage trains a fresh copy of the loaded weights (made in `prepare`: outside the stage's
fallback recording and byte counts, inside its duration), in eval mode as the backward stage
(dropout off, so that the CPU reference takes the same steps). On devices other than the CPU
the same steps run on a CPU copy with the plain for-loop AdamW (`foreach=False, fused=False`,
the reference TorchNeuron's own fused-AdamW tests compare against), step by step from the same
point (`follow`): AdamW's `exp_avg` / `exp_avg_sq` (and LoRA's gradients) within the dtype's
tolerance, and the device's update against AdamW's formula on its own moments (`check_adamw`
says why not the parameters themselves).

Under autocast the outputs and gradients are compared with the same step on the CPU under the
accelerator autocast policy TorchNeuron registers (`autocast_policy.on_cpu`), within bf16's
tolerance, or failing that with the fp32 step: a device that computes part of the step in more
precision than the CPU's bf16 kernels (the fused attention, in float32) is closer to that
(CLIP's embedding gradient: 2% of its scale from the CPU's mixed-precision step, 1.7% from
fp32). The CPU's own autocast is no reference: its lists cast other ops (2 of 38 gradients of a
ResNet beyond bf16's tolerance); nor is the fp32 step alone (bf16 moves a tiny T5's gradients,
chronos-bolt, by 7% of their scale).

The optimizer's part of each step (clip, step, zero_grad) is recorded apart as well, so that an
op falling back only there is a fallback with source `optimizer` (on devices whose fallbacks
are recorded as they happen: the emulated device).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch

from ground.schema import SkipReason, Stage
from model_configs import build
from runners import autocast_policy
from runners.devices.base import FallbackLog, collecting
from runners.numerics import tolerance
from runners.stages.engine import (
    AccuracyError,
    StageContext,
    StageRunner,
    StageSkipped,
    check_close,
)

# AdamW as users leave it (PyTorch's defaults: lr 1e-3, weight decay 1e-2), and the clipping
# most fine-tuning scripts use (transformers' Trainer: max_grad_norm=1.0).
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 1e-2
MAX_GRAD_NORM = 1.0
OPTIMIZER_STEPS = 2  # the second step runs with the optimizer's state in place
AMP_DTYPE = torch.bfloat16
# A small LoRA: peft's default target modules for the model type, rank 4, no dropout (so that
# the CPU reference takes the same step).
LORA_RANK = 4
LORA_ALPHA = 8


def trainable(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters a user's optimizer gets: those that require a gradient, by name."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def adamw(
    params: list[torch.nn.Parameter], *, fused: bool | None = None, reference: bool = False
) -> torch.optim.AdamW:
    """AdamW with PyTorch's defaults; `fused=True` its fused kernel; `reference` the plain
    for-loop implementation (the CPU reference)."""
    if reference:
        return torch.optim.AdamW(
            params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, foreach=False, fused=False
        )
    return torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, fused=fused)


def fused_adamw_devices() -> list[str]:
    """Device types PyTorch's AdamW accepts `fused=True` for (its own list)."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return list(_get_fused_kernels_supported_devices())


def loaded_weights(ctx: StageContext) -> torch.nn.Module:
    """The loaded model on the CPU, as no stage has run it (`ctx.pristine`)."""
    if ctx.pristine is None:
        raise RuntimeError("no untouched copy of the loaded weights (the load stage did not run)")
    if isinstance(ctx.pristine, Exception):
        raise RuntimeError(f"the loaded model cannot be copied: {ctx.pristine}") from ctx.pristine
    model: torch.nn.Module = ctx.pristine
    return model


def fresh_copies(ctx: StageContext) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """(a copy of the loaded weights on the device, a CPU copy for the reference or None)."""
    source = loaded_weights(ctx)
    device_model = ctx.device.prepare_model(copy.deepcopy(source))
    return device_model, copy.deepcopy(source) if ctx.compare else None


def forward_backward(
    ctx: StageContext, model: torch.nn.Module, inputs: dict[str, Any], *, amp: bool = False
) -> Any:
    """Forward and loss (with `amp`, under bf16 autocast: the device's own on the device, the
    accelerator policy applied on the CPU for the CPU reference), a finite loss, backward; the
    outputs."""
    device_type = next(model.parameters()).device.type
    region: Any = contextlib.nullcontext()
    policy = ctx.device.autocast_policy_file()
    if amp and device_type == "cpu" and ctx.device.torch_device.type != "cpu" and policy:
        region = autocast_policy.on_cpu(AMP_DTYPE, policy)
    elif amp:
        region = torch.autocast(device_type, dtype=AMP_DTYPE)
    with region:
        outputs = model(**inputs)
        loss = build.compute_loss(ctx.spec, _inner(model), outputs, inputs)
    value = float(loss.detach().float().cpu())
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is not finite: {value}")
    loss.backward()
    return outputs


def optimizer_part(
    params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer
) -> torch.Tensor:
    """What follows backward in a user's step: clip the gradients' norm, step, zero them."""
    norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


@contextlib.contextmanager
def optimizer_phase(ctx: StageContext) -> Iterator[FallbackLog]:
    """Record what the optimizer's part of one step runs (into `ctx.step_log` too): its
    fallbacks, and the device's native calls where it counts them."""
    if ctx.step_log is None:
        ctx.step_log = FallbackLog()
    with collecting(ctx.step_log), collecting(FallbackLog()) as one_step:
        yield one_step


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (what the adapter's loss expects)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def adamw_state(
    named: list[tuple[str, torch.nn.Parameter]], optimizer: torch.optim.Optimizer
) -> dict[str, torch.Tensor]:
    """AdamW's moments by parameter name (`exp_avg.x`, `exp_avg_sq.x`)."""
    out: dict[str, torch.Tensor] = {}
    for name, p in named:
        state = optimizer.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in state:
                out[f"{key}.{name}"] = state[key]
    return out


def adamw_expected(
    before: dict[str, torch.Tensor],
    named: list[tuple[str, torch.nn.Parameter]],
    optimizer: torch.optim.Optimizer,
) -> dict[str, torch.Tensor]:
    """The parameters AdamW's formula gives from `before` (the parameters before the step) and
    the moments the step left, computed on the CPU in float64: decoupled weight
    decay, then `lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq / (1 - beta2^t)) + eps)`."""
    states = {name: optimizer.state.get(p, {}) for name, p in named}
    return adamw_formula(before, states, optimizer.param_groups[0])


def adamw_formula(
    before: dict[str, torch.Tensor], states: dict[str, dict[str, Any]], group: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """`adamw_expected` from each parameter's AdamW state by name (`step`, `exp_avg`,
    `exp_avg_sq`, whole tensors) and the optimizer's parameter group."""
    lr, decay, eps = float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
    beta1, beta2 = (float(b) for b in group["betas"])
    out = {}
    for name, state in states.items():
        if name not in before or "exp_avg" not in state:
            continue
        t = float(state["step"])
        m = state["exp_avg"].detach().cpu().double()
        v = state["exp_avg_sq"].detach().cpu().double()
        start = before[name].cpu().double() * (1 - lr * decay)
        denom = v.sqrt() / math.sqrt(1 - beta2**t) + eps
        out[f"param.{name}"] = start - lr / (1 - beta1**t) * m / denom
    return out


def check_adamw(
    ctx: StageContext,
    what: str,
    named: list[tuple[str, torch.nn.Parameter]],
    optimizer: torch.optim.Optimizer,
    before: dict[str, torch.Tensor],
    reference: list[tuple[str, torch.nn.Parameter]],
    ref_optimizer: torch.optim.Optimizer,
) -> None:
    """One AdamW step on the device against the CPU's from the same point: its moments against
    the reference's, within the dtype's tolerance; its update against AdamW's formula on its
    own moments. The parameters themselves are not compared with the reference's: Adam divides
    by the root of the second moment, so a gradient element near eps that differs in its last
    bits moves its parameter by a good share of the learning rate (measured: 1.6e-4 after two
    steps in w2v-bert, whose moments agree to 4e-7)."""
    names = {n for n, _ in named}
    check_close(
        f"AdamW state after {what}",
        adamw_state([(n, p) for n, p in reference if n in names], ref_optimizer),
        adamw_state(named, optimizer),
        ctx,
    )
    check_close(
        f"parameters after {what} (AdamW's formula on the device's state)",
        adamw_expected(before, named, optimizer),
        {f"param.{n}": p.detach() for n, p in named},
        ctx,
    )


def follow(
    reference: list[tuple[str, torch.nn.Parameter]],
    ref_optimizer: torch.optim.Optimizer,
    named: list[tuple[str, torch.nn.Parameter]],
    optimizer: torch.optim.Optimizer,
    *,
    whole: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
) -> None:
    """Put the CPU reference where the device stands (its parameters and AdamW's moments), so
    that the next step starts from the same point on both: each step is then compared on its
    own, and what one step's rounding did is not amplified by the next (measured: dinov2's
    layer-norm moments 1.2e-3 apart after two free-running steps). `whole`: a sharded
    tensor's whole value (a group's parameters)."""
    device = dict(named)
    with torch.no_grad():
        for name, ref in reference:
            p = device.get(name)
            if p is None:
                continue
            ref.copy_(whole(p.detach()).cpu())
            state, ref_state = optimizer.state.get(p, {}), ref_optimizer.state.get(ref, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state and key in ref_state:
                    ref_state[key].copy_(whole(state[key].detach()).cpu())


def snapshot(named: list[tuple[str, torch.nn.Parameter]]) -> dict[str, torch.Tensor]:
    """The parameters as they are now (copies on their device)."""
    return {n: p.detach().clone() for n, p in named}


class _TrainingStage(StageRunner):
    """Shared by the training stages: fresh copies in `prepare`, dropped after `run`."""

    def __init__(self) -> None:
        self.model: torch.nn.Module | None = None
        self.reference: torch.nn.Module | None = None

    def prepare(self, ctx: StageContext) -> None:
        self.model, self.reference = fresh_copies(ctx)

    def run(self, ctx: StageContext) -> None:
        try:
            self.train(ctx)
        finally:
            self.model = self.reference = None

    def train(self, ctx: StageContext) -> None:
        raise NotImplementedError


class OptimizerStage(_TrainingStage):
    """Two training steps with PyTorch's default AdamW for the device."""

    name: ClassVar[Stage] = Stage.OPTIMIZER
    fused: ClassVar[bool | None] = None

    def train(self, ctx: StageContext) -> None:
        assert self.model is not None
        named = trainable(self.model)
        optimizer = adamw([p for _, p in named], fused=self.fused)
        ref_named = trainable(self.reference) if self.reference is not None else []
        ref_optimizer = adamw([p for _, p in ref_named], reference=True) if ref_named else None
        for step in range(1, OPTIMIZER_STEPS + 1):
            if ref_optimizer is not None and step > 1:
                follow(ref_named, ref_optimizer, named, optimizer)
            forward_backward(ctx, self.model, ctx.inputs)
            before = snapshot(named) if ref_optimizer is not None else {}
            with optimizer_phase(ctx) as last:
                optimizer_part([p for _, p in named], optimizer)
            if ref_optimizer is not None and self.reference is not None:
                forward_backward(ctx, self.reference, ctx.cpu_inputs)
                optimizer_part([p for _, p in ref_named], ref_optimizer)
                check_adamw(ctx, f"step {step}", named, optimizer, before, ref_named, ref_optimizer)
        ctx.device.synchronize()
        calls = sum(last.executed.values()) + last.call_count
        ctx.extra["step_op_calls"] = calls if calls else None


class FusedOptimizerStage(OptimizerStage):
    """The same two steps with `AdamW(fused=True)`."""

    name: ClassVar[Stage] = Stage.OPTIMIZER_FUSED
    fused: ClassVar[bool | None] = True

    def prepare(self, ctx: StageContext) -> None:
        device_type = ctx.device.torch_device.type
        if device_type not in fused_adamw_devices():
            raise StageSkipped(
                SkipReason.DEVICE_UNSUPPORTED_FEATURE,
                f"PyTorch has no fused AdamW for device type {device_type!r}",
            )
        super().prepare(ctx)


class AmpStage(_TrainingStage):
    """One step of mixed precision: fp32 weights, forward and loss under bf16 autocast."""

    name: ClassVar[Stage] = Stage.AMP

    def prepare(self, ctx: StageContext) -> None:
        if ctx.dtype != torch.float32:
            raise StageSkipped(
                SkipReason.NOT_APPLICABLE,
                "mixed precision trains fp32 weights under bf16 autocast; this run's dtype is "
                f"{str(ctx.dtype).removeprefix('torch.')}",
            )
        device_type = ctx.device.torch_device.type
        if not torch.amp.is_autocast_available(device_type):
            raise StageSkipped(
                SkipReason.DEVICE_UNSUPPORTED_FEATURE,
                f"PyTorch has no autocast for device type {device_type!r}",
            )
        super().prepare(ctx)

    def train(self, ctx: StageContext) -> None:
        assert self.model is not None
        named = trainable(self.model)
        optimizer = adamw([p for _, p in named])
        outputs = forward_backward(ctx, self.model, ctx.inputs, amp=True)
        if self.reference is not None:
            actual = {"output": outputs, **{f"grad.{n}": p.grad for n, p in named}}
            result = _compare_step(ctx, self.reference, actual, amp=True)
            if not result.ok:  # a device that computes more of it in fp32 is closer to this
                fp32 = copy.deepcopy(loaded_weights(ctx))
                result = min(result, _compare_step(ctx, fp32, actual), key=_error)
            ctx.extra["max_abs_error"] = result.max_abs_error
            if not result.ok:
                raise AccuracyError(
                    "outputs and gradients under autocast differ from the CPU's mixed-precision "
                    f"and fp32 steps: max abs error {result.max_abs_error:.3g} at "
                    f"{result.worst_name}",
                    result.max_abs_error,
                )
        with optimizer_phase(ctx):
            optimizer_part([p for _, p in named], optimizer)
        ctx.device.synchronize()


def _compare_step(
    ctx: StageContext, reference: torch.nn.Module, actual: dict[str, Any], *, amp: bool = False
) -> Any:
    """Run the reference's forward and backward on the CPU (under the device's autocast
    policy with `amp`) and compare its outputs and gradients with `actual` within bf16's
    tolerance."""
    from runners.numerics import compare_tensors

    outputs = forward_backward(ctx, reference, ctx.cpu_inputs, amp=amp)
    names = {n.removeprefix("grad.") for n in actual if n.startswith("grad.")}
    expected = {
        "output": outputs,
        **{f"grad.{n}": p.grad for n, p in trainable(reference) if n in names},
    }
    return compare_tensors(expected, actual, tol=tolerance(AMP_DTYPE))


def _error(result: Any) -> tuple[int, float]:
    return (len(result.mismatched), result.max_abs_error)


def lora_target_modules() -> dict[str, Any]:
    """peft's default LoRA target modules per transformers model type (its own table)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    return dict(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)


def peft_model_type(model: torch.nn.Module) -> str | None:
    """The model type peft looks its defaults up by (`model.config.to_dict()["model_type"]`)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    return to_dict().get("model_type") if callable(to_dict) else None


class LoraStage(_TrainingStage):
    """peft LoRA with its default target modules: one step, the adapters only."""

    name: ClassVar[Stage] = Stage.LORA

    def prepare(self, ctx: StageContext) -> None:
        try:
            from peft import LoraConfig, get_peft_model

            targets = lora_target_modules()
        except ImportError as exc:
            raise StageSkipped(
                SkipReason.MISSING_PACKAGE,
                "the lora stage needs the peft package (bash scripts/install.sh all,training)",
            ) from exc
        source = loaded_weights(ctx)
        model_type = peft_model_type(source) if ctx.spec.library == "transformers" else None
        if model_type not in targets:
            what = f"model type {model_type!r}" if model_type else f"{ctx.spec.library} models"
            raise StageSkipped(
                SkipReason.NOT_APPLICABLE,
                f"peft has no default LoRA target modules for {what}",
            )
        torch.manual_seed(ctx.seed)  # the adapters' initial weights
        config = LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0)
        cpu_model = get_peft_model(copy.deepcopy(source), config)
        self.model = ctx.device.prepare_model(copy.deepcopy(cpu_model))
        self.reference = cpu_model if ctx.compare else None

    def train(self, ctx: StageContext) -> None:
        assert self.model is not None
        named = trainable(self.model)
        others = [n for n, _ in named if "lora_" not in n]
        if not named or others:
            raise RuntimeError(
                "peft left no adapter parameter trainable"
                if not named
                else f"peft left {len(others)} non-adapter parameters trainable ({others[0]})"
            )
        optimizer = adamw([p for _, p in named])
        forward_backward(ctx, self.model, ctx.inputs)
        ctx.device.synchronize()
        missed = [
            n
            for n, p in named
            if p.grad is None or not bool(torch.isfinite(p.grad.detach().cpu()).all())
        ]
        if missed:
            raise RuntimeError(
                f"{len(missed)} of {len(named)} LoRA matrices got no finite gradient "
                f"(first: {missed[0]})"
            )
        grads = {n: p.grad.detach().clone() for n, p in named if p.grad is not None}
        before = snapshot(named) if self.reference is not None else {}
        with optimizer_phase(ctx):
            optimizer_part([p for _, p in named], optimizer)
        ctx.device.synchronize()
        if self.reference is not None:
            ref_named = trainable(self.reference)
            ref_optimizer = adamw([p for _, p in ref_named], reference=True)
            forward_backward(ctx, self.reference, ctx.cpu_inputs)
            ref_grads = {n: p.grad.detach().clone() for n, p in ref_named if p.grad is not None}
            optimizer_part([p for _, p in ref_named], ref_optimizer)
            check_close("LoRA gradients", ref_grads, grads, ctx)
            check_adamw(ctx, "the LoRA step", named, optimizer, before, ref_named, ref_optimizer)
