"""How much of a model its training step reaches: the backward stage's pass rule.

A parameter counts as trainable unless the model's own code freezes it: `requires_grad=False`,
or a module whose every call during the forward ran with autograd off (a frozen audio codec
under `torch.no_grad()`, a detector the matcher never trains). Those can get no gradient from
any input, so they are reported apart rather than counted as missed. Every other trainable
parameter must receive a finite gradient; the share that does is the pass figure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from model_configs.pass_rule import MIN_GRAD_SHARE  # noqa: F401  (the rule lives there)


@dataclass
class GradWatch:
    """Which modules ran during a forward, and which of them ever ran with autograd on."""

    ran: set[str] = field(default_factory=set)
    ran_with_grad: set[str] = field(default_factory=set)


@contextmanager
def watch_grad_mode(model: Any) -> Iterator[GradWatch]:
    """Record the grad mode each module of `model` runs under during the forward inside."""
    import torch

    watch = GradWatch()
    handles = []
    for name, module in model.named_modules():

        def hook(_module: Any, _args: Any, name: str = name) -> None:
            watch.ran.add(name)
            if torch.is_grad_enabled():
                watch.ran_with_grad.add(name)

        handles.append(module.register_forward_pre_hook(hook))
    try:
        yield watch
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class GradCoverage:
    trainable: int  # parameters the training step could reach
    reached: int  # of those, with a finite gradient
    frozen_by_model: int  # parameters of modules the model only runs with autograd off
    missed: tuple[str, ...]  # the trainable parameters with no finite gradient

    @property
    def share(self) -> float:
        return self.reached / self.trainable if self.trainable else 1.0


def grad_coverage(model: Any, watch: GradWatch | None = None) -> GradCoverage:
    """After backward: how many trainable parameters got a finite gradient. A parameter shared
    by several modules (tied weights, one codec reused by two towers) counts once, as frozen if
    the modules holding it ran and none of them with autograd on."""
    import torch

    owners: dict[int, tuple[str, Any, list[str]]] = {}
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                full = f"{module_name}.{name}" if module_name else name
                owners.setdefault(id(p), (full, p, []))[2].append(module_name)
    trainable = reached = frozen = 0
    missed: list[str] = []
    for full, p, modules in owners.values():
        if watch is not None:
            ran = [m for m in modules if m in watch.ran]
            if ran and not any(m in watch.ran_with_grad for m in ran):
                frozen += p.numel()
                continue
        trainable += p.numel()
        if p.grad is not None and bool(torch.isfinite(p.grad.detach().cpu()).all()):
            reached += p.numel()
        else:
            missed.append(full)
    return GradCoverage(trainable, reached, frozen, tuple(missed))
