"""Registry of library adapters, keyed by the Hub's exact `library_name`.

Names map to lazy `module:Class` targets (like the device registry), so importing this package
imports no model library. `adapter_for(entry)` picks the adapter of a catalog entry: its
`library_name` when the Hub gives one; otherwise an adapter that recognises the repo (Chronos-Bolt
repos carry no library tag), else transformers when the catalog names a `model_type`.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from typing import TYPE_CHECKING

from reports.errors import UnknownNameError

if TYPE_CHECKING:
    from model_configs.adapters.base import Adapter
    from model_configs.spec import CatalogEntry

ADAPTERS: dict[str, str] = {
    "transformers": "model_configs.adapters.transformers:TransformersAdapter",
    "diffusers": "model_configs.adapters.diffusers:DiffusersAdapter",
    "sentence-transformers": (
        "model_configs.adapters.sentence_transformers:SentenceTransformersAdapter"
    ),
    "timm": "model_configs.adapters.timm:TimmAdapter",
    "open_clip": "model_configs.adapters.open_clip:OpenClipAdapter",
    "chronos-forecasting": "model_configs.adapters.chronos:ChronosAdapter",
    "ultralytics": "model_configs.adapters.ultralytics:UltralyticsAdapter",
    "pyannote-audio": "model_configs.adapters.pyannote:PyannoteAdapter",
    "speechbrain": "model_configs.adapters.speechbrain:SpeechBrainAdapter",
    "diffusion-single-file": "model_configs.adapters.single_file:SingleFileAdapter",
}
# Adapters asked, in order, whether they recognise an entry the Hub gives no library for.
UNTAGGED_ORDER = ("chronos-forecasting",)


def adapter_names() -> list[str]:
    return sorted(ADAPTERS)


@functools.cache
def get_adapter(library: str) -> Adapter:
    """The adapter for a Hub `library_name` (exact); unknown names get a hint."""
    target = ADAPTERS.get(library)
    if target is None:
        close = difflib.get_close_matches(library, ADAPTERS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(
            f"No adapter for library {library!r}.{hint} Available: {', '.join(adapter_names())}",
        )
    module_name, attr = target.split(":")
    adapter: Adapter = getattr(importlib.import_module(module_name), attr)()
    return adapter


def library_for(entry: CatalogEntry) -> str | None:
    """The adapter name that would build this entry, or None if no adapter takes it."""
    if entry.library:
        return entry.library if entry.library in ADAPTERS else None
    for name in UNTAGGED_ORDER:
        if get_adapter(name).claims_untagged(entry):
            return name
    # No library on the Hub: a transformers model_type in its tags still names a config.
    return "transformers" if entry.model_type_hint else None
