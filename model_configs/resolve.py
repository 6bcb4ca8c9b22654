"""Resolve a model's full-size config, always labelled with where it came from.

Order for a catalog entry: refuse what must not run (remote code, other libraries); then the
repo's own config file (cached by `hfsweep catalog refresh`, whose record may say the repo is
gated or gone, or fetched from the Hub when online, both through `model_configs.hub`); then, the library's default config for the catalog's model type (transformers
`AutoConfig.for_model`, or a diffusers pipeline's known components). Anything else raises
ConfigError with a SkipReason, so the model still gets its rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model_configs.hub import cached_configs
from model_configs.spec import CatalogEntry, ResolvedConfig
from reports import settings
from reports.errors import ConfigError
from reports.ids import unsafe_model_id
from reports.schema import ConfigSource, SkipReason

# Hub library names -> the library that builds the model. Sentence-transformers repos are
# transformers models with a pooling head; peft adapters are not models of their own.
LIBRARIES: dict[str, str] = {
    "transformers": "transformers",
    "sentence-transformers": "transformers",
    "diffusers": "diffusers",
}


def library_for(entry: CatalogEntry) -> str | None:
    """The library that would build this entry, or None if it is not one we run."""
    if entry.library:
        return LIBRARIES.get(entry.library)
    # No library on the Hub: a transformers model_type in its tags still names a config.
    return "transformers" if entry.model_type_hint else None


def resolve_entry(
    entry: CatalogEntry,
    *,
    config_dir: Path | None = None,
    offline: bool | None = None,
    hub: Any = None,
) -> ResolvedConfig:
    offline = settings.hub_offline() if offline is None else offline
    library = library_for(entry)
    if entry.custom_code:
        raise ConfigError(
            "the repo needs trust_remote_code, which this tool never enables",
            reason=SkipReason.REMOTE_CODE.value,
            model_id=entry.model_id,
        )
    if library is None:
        raise ConfigError(
            f"library {entry.library or '(none)'!r} is not one this tool runs "
            f"(supported: {', '.join(sorted(LIBRARIES))})",
            reason=SkipReason.UNSUPPORTED_LIBRARY.value,
            model_id=entry.model_id,
        )
    unsafe = unsafe_model_id(entry.model_id)
    if unsafe:
        raise ConfigError(
            f"{unsafe}: not a model this tool can look up",
            reason=SkipReason.NOT_FOUND.value,
            model_id=entry.model_id,
        )
    filenames = ("model_index.json", "config.json") if library == "diffusers" else ("config.json",)
    if config_dir is not None:
        folder = cached_configs(config_dir, entry.model_id)  # a recorded gated / gone: a skip
        for filename in filenames:
            if folder is not None and (folder / filename).is_file():
                return _from_file(
                    entry.model_id, library, folder / filename, ConfigSource.HUB.value
                )
    if not offline:
        fetched = _fetch_from_hub(entry, library, filenames, hub=hub)
        if fetched is not None:
            return fetched
    return _from_defaults(entry, library)


def _fetch_from_hub(
    entry: CatalogEntry, library: str, filenames: tuple[str, ...], *, hub: Any
) -> ResolvedConfig | None:
    """The repo's configs from the Hub (config files only). Gated or gone: a skip; no config
    file: None (library defaults, labelled); the Hub failing after retries: HubError."""
    fetch = (hub or default_hub()).fetch_configs(entry.model_id, library=library)
    fetch.raise_for_skip()
    if fetch.folder is None:
        return None
    for filename in filenames:
        if filename in fetch.files:
            return _from_file(
                entry.model_id, library, fetch.folder / filename, ConfigSource.HUB.value
            )
    return None


_HUB: Any = None


def default_hub() -> Any:
    """One HubClient per process (its HTTP session is reused across models)."""
    global _HUB
    if _HUB is None:
        from model_configs.hub import HubClient

        _HUB = HubClient()
    return _HUB


def _from_defaults(entry: CatalogEntry, library: str) -> ResolvedConfig:
    if library == "diffusers":
        return _diffusers_default(entry)
    candidates = [c for c in (entry.model_type_hint or "").split("|") if c]
    if not candidates:
        raise ConfigError(
            "no config.json available and the catalog names no model_type",
            reason=SkipReason.NO_CONFIG.value,
            model_id=entry.model_id,
        )
    from transformers import CONFIG_MAPPING

    for model_type in candidates:
        if model_type in CONFIG_MAPPING:
            config = transformers_default_config(model_type)
            if entry.architectures_hint:
                config["architectures"] = list(entry.architectures_hint)
            return ResolvedConfig(
                model_id=entry.model_id,
                library="transformers",
                config=config,
                source=ConfigSource.TRANSFORMERS_DEFAULT.value,
                detail=f"transformers defaults for model_type={model_type!r} (from the catalog)",
            )
    raise ConfigError(
        f"transformers does not know model_type {' or '.join(map(repr, candidates))}",
        reason=SkipReason.UNKNOWN_MODEL_TYPE.value,
        model_id=entry.model_id,
    )


def transformers_default_config(model_type: str) -> dict[str, Any]:
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type).to_dict()


def _diffusers_default(entry: CatalogEntry) -> ResolvedConfig:
    pipelines = [t.split(":", 1)[1] for t in entry.tags if t.startswith("diffusers:")]
    if pipelines:
        try:
            from model_configs.diffusers_models import default_config_for_pipeline
        except ImportError:  # pragma: no cover - diffusers support not installed
            default_config_for_pipeline = None  # type: ignore[assignment]
        if default_config_for_pipeline is not None:
            for pipeline in pipelines:
                resolved = default_config_for_pipeline(pipeline)
                if resolved is not None:
                    return ResolvedConfig(
                        model_id=entry.model_id,
                        library="diffusers",
                        config=resolved.config,
                        source=ConfigSource.DIFFUSERS_DEFAULT.value,
                        detail=f"known component configs of {pipeline} (from the repo's tags)",
                        components=resolved.components,
                    )
    raise ConfigError(
        "no model_index.json / config.json available offline, and no known pipeline in its tags",
        reason=SkipReason.NO_CONFIG.value,
        model_id=entry.model_id,
    )


# ---- local files --------------------------------------------------------------------------


def resolve_local(path: str | Path) -> ResolvedConfig:
    """A local `config.json` / `model_index.json`, or a model folder holding one.

    Raises ConfigError (malformed_config / no_config) for unreadable input.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        for filename in ("model_index.json", "config.json"):
            if (p / filename).is_file():
                p = p / filename
                break
        else:
            raise ConfigError(
                f"{path}: folder has no config.json or model_index.json",
                reason=SkipReason.NO_CONFIG.value,
                model_id=str(path),
            )
    if not p.is_file():
        raise ConfigError(
            f"{path}: no such file", reason=SkipReason.NO_CONFIG.value, model_id=str(path)
        )
    config = read_config_file(p, model_id=str(path))
    library = (
        "diffusers" if "_class_name" in config or p.name == "model_index.json" else ("transformers")
    )
    return _from_file(str(path), library, p, ConfigSource.LOCAL.value, config=config)


def read_config_file(path: Path, *, model_id: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: cannot read: {exc}",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=model_id,
        ) from exc
    if not text.strip():
        raise ConfigError(
            f"{path}: the file is empty",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=model_id,
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=model_id,
        ) from exc
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: expected a JSON object, got {type(config).__name__}",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=model_id,
        )
    return config


def _from_file(
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
