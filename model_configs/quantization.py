"""Quantized checkpoints, as what they are: which method a repo needs and which path it takes.

The methods are data (`model_configs/data/quantization_methods.json`: each with how it is
recognised, its path, what it needs and why). A repo's method comes from its config's
`quantization_config` (its `quant_method`, or a key only that method writes), else, offline,
from the catalog's tags (the first method in the table whose tag the repo carries). Paths:

- `dequantize`: transformers dequantizes the checkpoint while loading it without CUDA; the tiny
  checkpoint is written in the method's format and loaded through transformers' quantizer
  (`model_configs.libraries.transformers.quantized`);
- `emulate`: the weights stay compressed and a pure-PyTorch library decompresses and
  fake-quantizes them in forward, on the device;
- `skip`: an `unsupported_quantization` skip naming the method and what it needs.

A repo tagged quantized whose config has no `quantization_config` (offline: transformers'
defaults for its architecture) gets its method's default block, so a quantized checkpoint is
never built as a plain model of its architecture. Importing this module imports no torch.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import SkipReason
from model_configs.spec import CatalogEntry, ResolvedConfig

TABLE = Path(__file__).resolve().parent / "data" / "quantization_methods.json"
PATHS = ("dequantize", "emulate", "skip")


@dataclass(frozen=True)
class Preset:
    """One scheme of a method that has several (compressed-tensors), chosen offline by tags or
    the repo's name."""

    name: str
    config: dict[str, Any]
    reason: str
    tags: tuple[str, ...] = ()
    name_pattern: str | None = None


@dataclass(frozen=True)
class Method:
    """One row of the table."""

    name: str
    path: str
    needs: str
    here: str
    reason: str
    quant_methods: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    package: str | None = None  # import name of the package the path needs
    extra: str | None = None  # the pyproject extra that installs it
    default_config: dict[str, Any] | None = None
    default_from: str | None = None
    presets: tuple[Preset, ...] = field(default_factory=tuple)

    @property
    def runs(self) -> bool:
        return self.path != "skip"


@functools.cache
def _table() -> dict[str, Any]:
    return json.loads(TABLE.read_text())


@functools.cache
def methods() -> tuple[Method, ...]:
    """The table's methods, in its order (the order tags are matched in)."""
    out = []
    for row in _table()["methods"]:
        presets = tuple(
            Preset(
                name=p["name"],
                config=p["config"],
                reason=p["reason"],
                tags=tuple(p.get("tags", ())),
                name_pattern=p.get("name_pattern"),
            )
            for p in row.get("presets", ())
        )
        out.append(
            Method(
                name=row["name"],
                path=row["path"],
                needs=row["needs"],
                here=row["here"],
                reason=row["reason"],
                quant_methods=tuple(row.get("quant_methods", ())),
                config_keys=tuple(row.get("config_keys", ())),
                tags=tuple(t.lower() for t in row.get("tags", ())),
                package=row.get("package"),
                extra=row.get("extra"),
                default_config=row.get("default_config"),
                default_from=row.get("default_from"),
                presets=presets,
            )
        )
    return tuple(out)


def get(name: str) -> Method:
    """The method called `name`; a quant_method the table does not assess gets the `other` row."""
    for m in methods():
        if m.name == name:
            return m
    other = _table()["other"]
    return Method(name=name, path=other["path"], needs=other["needs"], here=other["here"],
                  reason=other["reason"], quant_methods=(name,))  # fmt: skip


# ---- detection -------------------------------------------------------------------------------


def quantization_block(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """A config's `quantization_config` (or compressed-tensors' older `compression_config`)."""
    if not isinstance(config, dict):
        return None
    for key in ("quantization_config", "compression_config"):
        block = config.get(key)
        if isinstance(block, dict) and block:
            return block
    return None


def from_config(config: dict[str, Any] | None) -> Method | None:
    """The method a config's quantization block names: its `quant_method`, else a top-level key
    only that method writes (MLX's `quantization`, compressed-tensors' `compression_config`)."""
    if not isinstance(config, dict):
        return None
    block = quantization_block(config)
    quant_method = block.get("quant_method") if block else None
    if isinstance(quant_method, str) and quant_method:
        for m in methods():
            if quant_method in m.quant_methods:
                return m
        return get(quant_method)
    for m in methods():
        if any(isinstance(config.get(key), dict) for key in m.config_keys):
            return m
    if block is not None:  # a block that names no method (and no key says whose it is)
        return get("unknown")
    return None


def from_tags(tags: tuple[str, ...] | list[str]) -> Method | None:
    """Offline: the first method in the table whose tag the repo carries."""
    have = {t.lower() for t in tags}
    for m in methods():
        if have.intersection(m.tags):
            return m
    return None


def method_of(config: dict[str, Any] | None, tags: tuple[str, ...] | list[str] = ()) -> str | None:
    """The method a model's rows name: from its config, else from its tags; None if neither
    says it is quantized."""
    found = from_config(config) or from_tags(tags)
    return found.name if found else None


def method_of_entry(entry: CatalogEntry, resolved: ResolvedConfig | None) -> str | None:
    """The method of a catalog entry, once resolved (or not: a skip before its config). Tags
    speak for transformers checkpoints (and for repos no adapter took); another library's
    resolved model has only its config's word (a diffusers single-file repo tagged `gguf` for
    the GGUF files beside its safetensors runs the safetensors)."""
    if resolved is not None and resolved.library != "transformers":
        return method_of(resolved.config)
    return method_of(resolved.config if resolved is not None else None, entry.tags)


# ---- decisions -------------------------------------------------------------------------------


def unsupported(method: Method, model_id: str | None, *, seen_in: str) -> ConfigError:
    """The `unsupported_quantization` skip: the method, where it was read, what it needs."""
    return ConfigError(
        f"{method.name} quantization ({seen_in}) needs {method.needs}; {method.here}",
        reason=SkipReason.UNSUPPORTED_QUANTIZATION.value,
        model_id=model_id,
    )


def require(method: Method, model_id: str | None) -> None:
    """A runnable method's package, or a `missing_package` skip naming it and its extra."""
    if method.package and importlib.util.find_spec(method.package) is None:
        how = f"bash scripts/install.sh all,{method.extra}" if method.extra else None
        raise ConfigError(  # the message names the command too: it is what a row keeps
            f"{method.name}-quantized checkpoints need the {method.package} package, which is "
            "not installed" + (f": {how}" if how else ""),
            reason=SkipReason.MISSING_PACKAGE.value,
            model_id=model_id,
            hint=how,
        )


def refuse_unsupported(resolved: ResolvedConfig) -> Method | None:
    """Before a config is shrunk: a skip for a method with no path here (or whose package is
    missing); the runnable method, or None for an unquantized config."""
    method = from_config(resolved.config)
    if method is None:
        return None
    if not method.runs:
        raise unsupported(method, resolved.model_id, seen_in="its quantization_config")
    require(method, resolved.model_id)
    return method


def with_catalog_tags(entry: CatalogEntry, resolved: ResolvedConfig) -> ResolvedConfig:
    """A transformers config that has no quantization block, for a repo tagged quantized: the
    tagged method's default block (or a skip where the method has no path, or, offline, no
    block to apply). Other configs come back unchanged."""
    if resolved.library != "transformers" or from_config(resolved.config) is not None:
        return resolved
    method = from_tags(entry.tags)
    if method is None:
        return resolved
    seen_in = f"the catalog's tags: {', '.join(sorted(set(entry.tags) & set(method.tags)))}"
    if not method.runs:
        raise unsupported(method, entry.model_id, seen_in=seen_in)
    block, why = _default_block(method, entry)
    if block is None:
        raise ConfigError(
            f"{method.name} quantization ({seen_in}): {why}",
            reason=SkipReason.UNSUPPORTED_QUANTIZATION.value,
            model_id=entry.model_id,
        )
    config = {**resolved.config, "quantization_config": block}
    detail = f"{resolved.detail}; quantization_config: {why}".lstrip("; ")
    return replace(resolved, config=config, detail=detail)


def _default_block(method: Method, entry: CatalogEntry) -> tuple[dict[str, Any] | None, str]:
    """The block a tagged repo is built with, and why that one."""
    if not method.presets:
        if method.default_config is None:
            return None, f"{method.name} has no default quantization_config"
        return copy.deepcopy(method.default_config), (
            f"{method.name} defaults, the shape of {method.default_from}"
        )
    tags = {t.lower() for t in entry.tags}
    for preset in method.presets:
        hit = tags.intersection(preset.tags)
        if hit:
            return copy.deepcopy(preset.config), (
                f"the {method.name} {preset.name} scheme (tags: {', '.join(sorted(hit))})"
            )
    name = entry.model_id.rsplit("/", 1)[-1]
    for preset in method.presets:
        if preset.name_pattern and re.search(preset.name_pattern, name):
            return copy.deepcopy(preset.config), (
                f"the {method.name} {preset.name} scheme (the repo's name)"
            )
    return None, (
        "neither the catalog's tags nor the repo's name say which of its schemes "
        f"({', '.join(p.name for p in method.presets)}) it uses, and offline there is no config "
        "to read it from"
    )


def table_rows() -> list[dict[str, Any]]:
    """The table as plain rows (README, benches)."""
    return [
        {
            "method": m.name,
            "path": m.path,
            "recognised_by": {
                "quant_method": list(m.quant_methods),
                "config_keys": list(m.config_keys),
                "tags": list(m.tags),
            },
            "needs": m.needs,
            "here": m.here,
            "reason": m.reason,
        }
        for m in methods()
    ]
