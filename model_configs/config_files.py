"""Reading a model's config files: bounded, JSON objects, never a repo's code.

A leaf under `resolve` and the adapters (both read files the same way): a file is refused
(`malformed_config`) past the shape limits of `model_configs.guards`; a transformers config
that maps to repo code transformers does not know is a `remote_code` skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import SkipReason
from model_configs import guards
from model_configs.spec import ResolvedConfig


def read_config_file(path: Path, *, model_id: str) -> dict[str, Any]:
    """A config file as a dict; unreadable, empty, not JSON, not an object or beyond the
    shape limits (`model_configs.guards`): a `malformed_config` ConfigError."""
    config = _parse(path, model_id)
    if not isinstance(config, dict):
        raise guards.malformed(
            f"{path}: expected a JSON object, got {type(config).__name__}", model_id
        )
    guards.check_shape(config, model_id=model_id)
    return config


def read_json_file(path: Path, *, model_id: str) -> Any:
    """A JSON file of any value (a list of modules...), held to the same limits as a config."""
    value = _parse(path, model_id)
    guards.check_shape(value, model_id=model_id)
    return value


def _parse(path: Path, model_id: str) -> Any:
    try:
        size = path.stat().st_size
        if size > guards.MAX_FILE_BYTES:
            raise guards.malformed(
                f"{path}: {size:,} bytes, more than a config file has ({guards.MAX_FILE_BYTES:,})",
                model_id,
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise guards.malformed(f"{path}: cannot read: {exc}", model_id) from exc
    if not text.strip():
        raise guards.malformed(f"{path}: the file is empty", model_id)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        error = guards.malformed(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            model_id,
        )
        error.hint = json_hint(text, exc)
        raise error from exc
    except RecursionError:  # nested deeper than the JSON parser goes
        raise guards.malformed(f"{path}: nested too deep to parse", model_id) from None


def json_hint(text: str, exc: json.JSONDecodeError) -> str:
    """Where a JSON file breaks, shown (the line, a caret under the column) with the usual
    cause: a trailing comma, a missing quote or comma, a comment, single quotes."""
    line = text.splitlines()[exc.lineno - 1] if text.splitlines() else ""
    start = max(0, exc.colno - 40)
    excerpt = line[start : exc.colno + 20]
    caret = " " * (exc.colno - 1 - start) + "^"
    before = line[: exc.colno - 1].rstrip()
    if before.endswith(",") and exc.msg.startswith("Expecting property name"):
        cause = "a comma before the closing brace (JSON allows no trailing comma)"
    elif "'" in excerpt and "double quotes" in exc.msg:
        cause = "single quotes (JSON strings take double quotes)"
    elif "//" in line or "#" in line.lstrip()[:1]:
        cause = "a comment (JSON has none)"
    else:
        cause = "a missing comma, quote or brace"
    return f"{cause}, near:\n  {excerpt}\n  {caret}"


def from_file(
    model_id: str,
    library: str,
    path: Path,
    source: str,
    *,
    config: dict[str, Any] | None = None,
) -> ResolvedConfig:
    config = config if config is not None else read_config_file(path, model_id=model_id)
    if library == "transformers" and "_class_name" in config:
        library = "diffusers"
    if library == "transformers":
        _refuse_remote_code(model_id, config)
    components: dict[str, dict[str, Any]] = {}
    if path.name == "model_index.json":
        for name, value in config.items():
            sub = path.parent / name / "config.json"
            if isinstance(value, list) and sub.is_file():
                components[name] = read_config_file(sub, model_id=model_id)
    return ResolvedConfig(
        model_id=model_id,
        library=library,
        config=config,
        source=source,
        detail=str(path),
        components=components,
    )


def _refuse_remote_code(model_id: str, config: dict[str, Any]) -> None:
    """A config whose model_type transformers does not know but that maps to repo code."""
    if not config.get("auto_map"):
        return
    from transformers import CONFIG_MAPPING

    if config.get("model_type") not in CONFIG_MAPPING:
        raise ConfigError(
            "the config maps to code in the repo (auto_map) and transformers does not know "
            f"model_type {config.get('model_type')!r}; trust_remote_code stays off",
            reason=SkipReason.REMOTE_CODE.value,
            model_id=model_id,
        )
