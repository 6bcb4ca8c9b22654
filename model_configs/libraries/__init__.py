"""The libraries: one package per Hub library, and their registry, keyed by the Hub's exact
`library_name`.

Each library is a package beside this module (`transformers/`, `diffusers/`, `timm/`, ...):
its adapter (`adapter.py`, an `Adapter` of `base.py`), whatever else it needs to shrink, build
and feed its models, and its data (`data/`). `ADAPTERS` is the only place that names them: a
name maps to a lazy `module:Class` target (like the device registry), so importing this package
imports no model library. `library_for(entry)` picks the adapter of a catalog entry: its
`library_name` when the Hub gives one; otherwise an adapter that recognises the repo (Chronos-Bolt
repos carry no library tag), else transformers when the catalog names a `model_type`.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from typing import TYPE_CHECKING

from ground.errors import UnknownNameError

if TYPE_CHECKING:
    from model_configs.libraries.base import Adapter
    from model_configs.spec import CatalogEntry

ADAPTERS: dict[str, str] = {
    "transformers": "model_configs.libraries.transformers.adapter:TransformersAdapter",
    "diffusers": "model_configs.libraries.diffusers.adapter:DiffusersAdapter",
    "sentence-transformers": (
        "model_configs.libraries.sentence_transformers.adapter:SentenceTransformersAdapter"
    ),
    "timm": "model_configs.libraries.timm.adapter:TimmAdapter",
    "open_clip": "model_configs.libraries.open_clip.adapter:OpenClipAdapter",
    "chronos-forecasting": "model_configs.libraries.chronos.adapter:ChronosAdapter",
    "ultralytics": "model_configs.libraries.ultralytics.adapter:UltralyticsAdapter",
    "pyannote-audio": "model_configs.libraries.pyannote.adapter:PyannoteAdapter",
    "speechbrain": "model_configs.libraries.speechbrain.adapter:SpeechBrainAdapter",
    "diffusion-single-file": "model_configs.libraries.single_file.adapter:SingleFileAdapter",
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
