"""Every environment-driven setting, read in one place."""

from __future__ import annotations

import os
from pathlib import Path

STORE_ENV = "HFSWEEP_STORE"
DEFAULT_STORE = "hfsweep-store"


def default_store() -> str:
    """The store folder or URI: `$HFSWEEP_STORE`, else `hfsweep-store` in the working folder."""
    return os.environ.get(STORE_ENV, DEFAULT_STORE)


def cache_dir() -> Path:
    """Cache of Hub config files fetched by the catalog and config resolution."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hfsweep"
    return Path(os.environ.get("HFSWEEP_CACHE", default))


def hub_offline() -> bool:
    """True when the Hub must not be contacted (HF_HUB_OFFLINE=1, as in tests)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def hub_token() -> str | None:
    return os.environ.get("HF_TOKEN") or None
