"""The pass rule of a shrunk model, defined once.

A shrunk model passes when it is small (at most `MAX_PARAMS` parameters), its training loss is
finite, and at least `MIN_GRAD_SHARE` of its trainable parameters receive a finite gradient
(`model_configs.grad_coverage` says which parameters count). The backward stage, every coverage
bench and the tests use `failure` below, so the numbers live here only.
"""

from __future__ import annotations

import math

MIN_GRAD_SHARE = 0.9  # share of trainable parameters that must get a finite gradient
MAX_PARAMS = 5_000_000  # a shrunk model above this is not "tiny"


def grad_failure(grad_share: float) -> str | None:
    """Why the gradient part of the rule fails, or None."""
    if grad_share < MIN_GRAD_SHARE:
        return (
            f"gradient reached {grad_share:.0%} of trainable parameters "
            f"(the pass rule needs {MIN_GRAD_SHARE:.0%})"
        )
    return None


def size_failure(params: int) -> str | None:
    """Why the size part of the rule fails, or None."""
    if params > MAX_PARAMS:
        return f"shrunk model has {params / 1e6:.2f}M parameters (cap {MAX_PARAMS / 1e6:.0f}M)"
    return None


def failure(*, params: int, grad_share: float, loss: float) -> str | None:
    """The first part of the pass rule a shrunk model breaks, or None when it passes."""
    if not math.isfinite(loss):
        return f"loss is not finite ({loss})"
    return size_failure(params) or grad_failure(grad_share)


def passes(*, params: int, grad_share: float, loss: float) -> bool:
    return failure(params=params, grad_share=grad_share, loss=loss) is None
