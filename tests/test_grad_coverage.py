"""The backward pass rule: what counts as trainable, what as frozen by the model itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from model_configs.grad_coverage import grad_coverage, watch_grad_mode  # noqa: E402


class Model(torch.nn.Module):
    def __init__(self, freeze_codec: bool) -> None:
        super().__init__()
        self.codec = torch.nn.Linear(4, 4)  # 20 params
        self.proj = torch.nn.Linear(4, 4)  # 20 params
        self.unused = torch.nn.Linear(4, 2)  # 10 params: never called
        self.freeze_codec = freeze_codec

    def forward(self, x):
        if self.freeze_codec:
            with torch.no_grad():
                x = self.codec(x)
        else:
            x = self.codec(x)
        return self.proj(x)


def _step(model):
    with watch_grad_mode(model) as watch:
        out = model(torch.randn(2, 4))
    out.sum().backward()
    return grad_coverage(model, watch)


def test_modules_the_model_runs_without_autograd_are_frozen_not_missed():
    coverage = _step(Model(freeze_codec=True))
    assert coverage.frozen_by_model == 20
    assert (coverage.trainable, coverage.reached) == (30, 20)
    assert coverage.missed == ("unused.weight", "unused.bias")


def test_an_unused_module_is_missed_whatever_the_grad_mode():
    coverage = _step(Model(freeze_codec=False))
    assert coverage.frozen_by_model == 0
    assert (coverage.trainable, coverage.reached) == (50, 40)
    assert coverage.share == pytest.approx(0.8)


def test_non_finite_gradients_do_not_count_and_tied_weights_count_once():
    model = Model(freeze_codec=False)
    del model.unused
    model.register_module("tied", torch.nn.Linear(4, 4))  # never called
    model.tied.weight = model.proj.weight
    coverage = _step(model)
    assert coverage.trainable == 20 + 20 + 4  # codec, proj, tied.bias (tied.weight is proj's)
    model.proj.weight.grad[0, 0] = float("nan")
    assert "proj.weight" in grad_coverage(model).missed
