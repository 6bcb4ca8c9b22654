"""Resolve a model's full-size config, always labelled with where it came from.

Order for a catalog entry: refuse what must not run (remote code, libraries no adapter takes, an
adapter whose package is not installed); then the files the Hub serves for the entry's library
(cached by `hfsweep catalog refresh`, whose record may say the repo is gated or gone, or fetched
from the Hub when online, both through `model_configs.hub`); then, offline, the adapter's
defaults for the architecture the entry names (transformers `AutoConfig.for_model` for the
catalog's model type, a diffusers pipeline's known components, timm's architecture from the
repo name, ...). A repo the catalog tags quantized whose config has no `quantization_config`
gets its method's (`model_configs.quantization`), or a skip. Anything else raises ConfigError
with a SkipReason, so the model still gets its rows. The adapters live in
`model_configs.libraries`, one package per Hub library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ground import settings
from ground.errors import ConfigError
from ground.ids import unsafe_model_id
from ground.schema import ConfigSource, SkipReason
from model_configs.config_files import from_file, read_config_file
from model_configs.hub import cached_configs
from model_configs.quantization import with_catalog_tags
from model_configs.spec import CatalogEntry, ResolvedConfig


def library_for(entry: CatalogEntry) -> str | None:
    """The adapter (a Hub library name) that would build this entry, or None."""
    from model_configs.libraries import library_for as adapter_library

    return adapter_library(entry)


def resolve_entry(
    entry: CatalogEntry,
    *,
    config_dir: Path | None = None,
    offline: bool | None = None,
    hub: Any = None,
) -> ResolvedConfig:
    from model_configs.libraries import adapter_names, get_adapter

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
            f"(supported: {', '.join(adapter_names())})",
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
    adapter = get_adapter(library)
    adapter.require_package(entry.model_id)
    return with_catalog_tags(entry, _resolve_with(adapter, entry, config_dir, offline, hub))


def _resolve_with(
    adapter: Any, entry: CatalogEntry, config_dir: Path | None, offline: bool, hub: Any
) -> ResolvedConfig:
    if config_dir is not None:
        folder = cached_configs(config_dir, entry.model_id)  # a recorded gated / gone: a skip
        if folder is not None:
            found = adapter.from_files(entry.model_id, folder, ConfigSource.HUB.value)
            if found is not None:
                return found
    if not offline:
        fetched = _fetch_from_hub(entry, adapter, hub=hub)
        if fetched is not None:
            return fetched
    return adapter.default_config(entry)


def _fetch_from_hub(entry: CatalogEntry, adapter: Any, *, hub: Any) -> ResolvedConfig | None:
    """The repo's configs from the Hub (the adapter's config files only). Gated or gone: a skip;
    no config file: None (the adapter's defaults, labelled); the Hub failing after retries:
    HubError."""
    fetch = (hub or default_hub()).fetch_configs(entry.model_id, library=adapter.library)
    fetch.raise_for_skip()
    if fetch.folder is None:
        return None
    return adapter.from_files(entry.model_id, fetch.folder, ConfigSource.HUB.value)


_HUB: Any = None


def default_hub() -> Any:
    """One HubClient per process (its HTTP session is reused across models)."""
    global _HUB
    if _HUB is None:
        from model_configs.hub import HubClient

        _HUB = HubClient()
    return _HUB


def transformers_default_config(model_type: str) -> dict[str, Any]:
    """transformers' default config for `model_type` (what tests and benches build from)."""
    from model_configs.libraries import get_adapter

    entry = CatalogEntry(model_id=f"default/{model_type}", model_type_hint=model_type)
    return get_adapter("transformers").default_config(entry).config


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
    return from_file(str(path), library, p, ConfigSource.LOCAL.value, config=config)
