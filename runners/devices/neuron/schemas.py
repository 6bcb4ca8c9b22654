"""What the emulator reads of an ATen op's schema, once per op: its name, whether it is a view,
which arguments it writes in place, which are plain tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OpSchema:
    name: str  # aten::name.overload (no suffix for the default overload)
    is_view: bool  # returns an alias of an input without writing it: metadata only
    mutated: tuple[int | str, ...]  # positions / keyword names of arguments written in place
    tensor_args: tuple[int | str, ...] = ()  # arguments typed `Tensor` (not optional, not lists)


_OP_SCHEMAS: dict[Any, OpSchema] = {}


def op_schema(op: Any, name: str | None = None) -> OpSchema:
    info = _OP_SCHEMAS.get(op)
    if info is None:
        schema = op._schema
        mutated: list[int | str] = []
        tensor_args: list[int | str] = []
        for i, arg in enumerate(schema.arguments):
            key = arg.name if arg.kwarg_only else i
            if arg.alias_info is not None and arg.alias_info.is_write:
                mutated.append(key)
            if str(arg.type) == "Tensor":
                tensor_args.append(key)
        is_view = any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
        )
        info = OpSchema(name or op.name(), is_view, tuple(mutated), tuple(tensor_args))
        _OP_SCHEMAS[op] = info
    return info
