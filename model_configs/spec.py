"""Plain data passed between the steps that happen before a model runs.

CatalogEntry (what the Hub says about a repo) -> ResolvedConfig (its real config and where it came
from) -> TinySpec (the shrunk config, the class to build, and what the shrink changed). These are
JSON-able and picklable: they travel to Ray workers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


def config_hash(obj: Any) -> str:
    """Stable short hash of a JSON-able object (key order does not matter)."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CatalogEntry:
    """One model of the catalog, as the Hub reported it."""

    model_id: str
    rank: int | None = None
    downloads: int | None = None
    likes: int | None = None
    pipeline_tag: str | None = None
    library: str | None = None
    model_type_hint: str | None = (
        None  # inferred, not read from the repo (see the catalog's README)
    )
    architectures_hint: tuple[str, ...] = ()
    custom_code: bool = False
    gated: bool = False
    tags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResolvedConfig:
    """A model's full-size config and where it came from (`source` is a ConfigSource value)."""

    model_id: str
    library: str  # "transformers" | "diffusers"
    config: dict[str, Any]
    source: str
    detail: str = ""  # e.g. the file path, or "model_type_hint=llama"
    components: dict[str, dict[str, Any]] = field(default_factory=dict)  # diffusers pipelines

    @property
    def hash(self) -> str:
        return config_hash({"config": self.config, "components": self.components})

    @property
    def model_type(self) -> str | None:
        value = self.config.get("model_type") or self.config.get("_class_name")
        return str(value) if value else None


@dataclass(frozen=True)
class TinySpec:
    """Everything a runner needs to build one tiny model and feed it.

    `architecture` is the class to instantiate (a transformers or diffusers class name);
    `config` is the shrunk config as a JSON-able dict (transformers `to_dict()` form, or a
    diffusers config with `_class_name`); `changes` maps dotted config keys to
    [original, shrunk] for every value the shrink touched.
    """

    library: str
    model_type: str | None
    architecture: str
    config: dict[str, Any]
    generative: bool = False
    task: str | None = (
        None  # what the class does: "causal-lm", "seq2seq", "image-classification"...
    )
    changes: dict[str, list[Any]] = field(default_factory=dict)
    # Where the config of what runs came from, when that is not the resolved config's `source`
    # (a pipeline component built from class defaults: `diffusers_default`). A ConfigSource value.
    config_source: str | None = None

    @property
    def hash(self) -> str:
        return config_hash(
            {"library": self.library, "architecture": self.architecture, "config": self.config}
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TinySpec:
        return cls(**data)
