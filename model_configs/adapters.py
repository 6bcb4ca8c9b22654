"""The library registry's public names at the path callers have long imported them from.

The registry itself is `model_configs.libraries` (`ADAPTERS`, one package per Hub library); this
module only re-exports it, so `from model_configs.adapters import get_adapter` keeps working.
"""

from __future__ import annotations

from model_configs.libraries import (
    ADAPTERS,
    UNTAGGED_ORDER,
    adapter_names,
    get_adapter,
    library_for,
)

__all__ = ["ADAPTERS", "UNTAGGED_ORDER", "adapter_names", "get_adapter", "library_for"]
