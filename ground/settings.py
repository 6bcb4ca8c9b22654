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


def hub_timeout_s() -> float:
    """Seconds any one Hub request may wait for the server (`HFSWEEP_HUB_TIMEOUT`, default 30)."""
    return _positive_float("HFSWEEP_HUB_TIMEOUT", 30.0)


def hub_retries() -> int:
    """Retries of a Hub call that timed out, was rate-limited or hit a server error
    (`HFSWEEP_HUB_RETRIES`, default 3)."""
    return int(_positive_float("HFSWEEP_HUB_RETRIES", 3, allow_zero=True))


def _positive_float(name: str, default: float, *, allow_zero: bool = False) -> float:
    from ground.errors import UsageError

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{name} must be {'0 or more' if allow_zero else 'above 0'}, not {raw}")
    return value
