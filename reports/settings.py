"""Environment-driven settings, read in one place."""

from __future__ import annotations

import os

STORE_ENV = "HFSWEEP_STORE"
DEFAULT_STORE = "hfsweep-store"


def default_store() -> str:
    """The store folder or URI: `$HFSWEEP_STORE`, else `hfsweep-store` in the working folder."""
    return os.environ.get(STORE_ENV, DEFAULT_STORE)
