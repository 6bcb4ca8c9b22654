"""A device is judged against a CPU reference only where the reference reproduces itself: a
forward that draws random numbers (a sampling VAE, VibeVoice's sigma-VAE) gives no accuracy
verdict, and a real difference still fails. The device is the CPU compared with itself (a copy
of the model), so the test needs no backend."""

from __future__ import annotations

import copy

import pytest
import torch

from runners.settings import DeviceChoice, ModelSettings
from runners.stages.core.forward import ForwardStage
from runners.stages.engine import AccuracyError, StageContext, check_close


class Noisy(torch.nn.Module):
    """A linear layer whose output gets Gaussian noise, as a sampling encoder's does."""

    def __init__(self, noise: float):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.noise = noise

    def forward(self, x):
        out = self.linear(x)
        return {"out": out + self.noise * torch.randn_like(out)}


def context(reference: torch.nn.Module, model: torch.nn.Module) -> StageContext:
    device = DeviceChoice("cpu").build()
    ctx = StageContext(spec=None, device=device, settings=ModelSettings(), compare=True)  # type: ignore[arg-type]
    ctx.reference, ctx.model = reference, model
    ctx.cpu_inputs = ctx.inputs = {"x": torch.randn(4, 8)}
    return ctx


def test_a_forward_that_draws_random_numbers_is_not_judged():
    reference = Noisy(noise=1.0).eval()
    ctx = context(reference, copy.deepcopy(reference))
    ForwardStage().run(ctx)  # the two draws differ: without the check, fail_accuracy
    assert ctx.extra.get("max_abs_error") is None and ctx.extra["not_compared"] == "forward output"


def test_a_real_difference_still_fails():
    reference = Noisy(noise=0.0).eval()
    model = copy.deepcopy(reference)
    with torch.no_grad():
        model.linear.weight.add_(0.1)
    ctx = context(reference, model)
    with pytest.raises(AccuracyError, match="forward output differ"):
        ForwardStage().run(ctx)
    assert ctx.extra["max_abs_error"] > 0.01 and "not_compared" not in ctx.extra


def test_an_equal_output_is_measured():
    reference = Noisy(noise=0.0).eval()
    ctx = context(reference, copy.deepcopy(reference))
    ForwardStage().run(ctx)
    assert ctx.extra["max_abs_error"] == 0.0


def test_gradients_from_a_reference_that_reproduces_itself_are_judged():
    ctx = context(Noisy(0.0), Noisy(0.0))
    expected = {"w": torch.ones(3)}
    with pytest.raises(AccuracyError, match="gradients differ"):
        check_close("gradients", expected, {"w": torch.zeros(3)}, ctx, again=lambda: expected)
    # and the random state the caller had is left as it was
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    check_close(
        "gradients",
        {"w": torch.ones(3)},
        {"w": torch.zeros(3)},
        ctx,
        again=lambda: {"w": torch.randn(3)},
    )
    assert torch.equal(torch.rand(1), before)
