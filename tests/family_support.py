"""Shared check for the per-family tests: shrink a default config, build, feed, train."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model_configs.pass_rule import MAX_PARAMS, MIN_GRAD_SHARE

GRAD_SHARE_MIN = MIN_GRAD_SHARE  # the pass rule, defined once in model_configs/pass_rule.py


@dataclass
class FamilyRun:
    spec: Any
    model: Any
    inputs: dict[str, Any]
    loss: Any
    params: int
    grad_share: float


def run_default(model_type: str, **shrink_kwargs: Any) -> FamilyRun:
    """transformers' default config for `model_type`, shrunk and run through forward+backward."""
    import torch
    import transformers

    from ground.schema import ConfigSource
    from model_configs.build import build_model, compute_loss, make_inputs
    from model_configs.grad_coverage import grad_coverage, watch_grad_mode
    from model_configs.shrink import shrink
    from model_configs.spec import ResolvedConfig

    resolved = ResolvedConfig(
        model_id=f"default/{model_type}",
        library="transformers",
        config=transformers.CONFIG_MAPPING[model_type]().to_dict(),
        source=ConfigSource.TRANSFORMERS_DEFAULT.value,
    )
    spec = shrink(resolved, **shrink_kwargs)
    torch.manual_seed(0)
    model = build_model(spec)
    inputs = make_inputs(spec, model, purpose="train")
    with watch_grad_mode(model) as watch:
        outputs = model(**inputs)
    loss = compute_loss(spec, model, outputs, inputs)
    loss.backward()
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return FamilyRun(spec, model, inputs, loss, total, grad_coverage(model, watch).share)


def assert_trains(run: FamilyRun) -> None:
    """The pass rule of bench/shrink_coverage.py: small, finite, and >=90% of weights trained."""
    import torch

    name = run.spec.model_type
    assert run.params <= MAX_PARAMS, f"{name}: {run.params:,} parameters"
    assert torch.isfinite(run.loss), f"{name}: loss {run.loss}"
    assert run.grad_share >= GRAD_SHARE_MIN, f"{name}: gradient reached {run.grad_share:.0%}"
