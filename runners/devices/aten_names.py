"""ATen op names as every device and the op sweep write them (`aten::name.overload`)."""

from __future__ import annotations


def base_name(op: str) -> str:
    """`aten::add_.Tensor` -> `aten::add`: drop the overload and an in-place underscore."""
    name = op.split(".", 1)[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def overload_name(op: str) -> str:
    """`aten::add.Tensor` stays, `aten::add.default` -> `aten::add` (how OpOverload names)."""
    return op[: -len(".default")] if op.endswith(".default") else op
