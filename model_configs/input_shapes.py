"""Other input shapes of a tiny model's inputs, for the `shapes` stage: the same inputs at a
longer sequence and at a larger batch, made from the inputs any adapter built (so that every
library gets them the same way, without asking each adapter for sizes).

- a longer sequence: the token inputs repeated along their sequence dimension. The sequence
  length is dim 1 of the first integer 2-D tensor (token ids); every tensor whose dim 1 has
  that length (masks, labels, positions, embeddings) is repeated along it. Inputs with no
  token sequence (images, audio) have none: the variant does not apply;
- a larger batch: every tensor whose dim 0 is the batch (dim 0 of the first tensor) repeated
  along it.
A variant is data, not a promise that the model takes it: the stage runs it eagerly first
and leaves out a variant the model itself refuses (image tokens that no longer match their
images, a fixed position table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    return value


def sequence_length(inputs: dict[str, Any]) -> int | None:
    """The token sequence's length (dim 1 of the first integer 2-D tensor), or None."""
    import torch

    for t in _tensors(inputs):
        integer = not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)
        if t.dim() == 2 and integer:
            return int(t.shape[1])
    return None


def longer_sequence(inputs: dict[str, Any], factor: int) -> dict[str, Any] | None:
    """The inputs with their token sequence `factor` times as long (None: no token sequence)."""
    import torch

    length = sequence_length(inputs)
    if length is None:
        return None

    def grow(t: Any) -> Any:
        if t.dim() >= 2 and t.shape[1] == length:
            return torch.cat([t] * factor, dim=1)
        return t

    return dict(_map(inputs, grow))


def larger_batch(inputs: dict[str, Any], factor: int) -> dict[str, Any] | None:
    """The inputs with `factor` times the batch (None: no tensor input)."""
    import torch

    first = next(_tensors(inputs), None)
    if first is None or first.dim() == 0:
        return None
    batch = int(first.shape[0])

    def grow(t: Any) -> Any:
        if t.dim() >= 1 and t.shape[0] == batch:
            return torch.cat([t] * factor, dim=0)
        return t

    return dict(_map(inputs, grow))
