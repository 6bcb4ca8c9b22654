"""The interface every library adapter implements.

An adapter is one Hub library (keyed by the Hub's exact `library_name`). It resolves a model's
full-size config offline (the library's bundled defaults for an architecture the repo names) or
from the file the Hub serves for that library, shrinks it to a tiny representative config,
builds the model with the library's own constructor (never code from the repo), makes inputs
and a training loss, and saves / loads it the way the library does. It names the optional
package it needs; without that package its models are a `missing_package` skip naming it.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ground.errors import ConfigError
from ground.schema import ConfigSource, SkipReason
from model_configs.config_files import read_config_file
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec

TABLES = Path("data") / "tables.json"  # a library's tables, inside its package


class NotSizable(Exception):
    """No full-size spec for this library or this kind of spec (`Adapter.full_size_spec`)."""


@dataclass(frozen=True)
class KVCacheLayout:
    """The layers a generating model's KV cache spans, as its library's config says."""

    full_layers: int  # attention layers whose cache grows with every token
    windowed_layers: int  # layers whose cache stops growing at `window` tokens
    window: int | None  # tokens a windowed layer keeps (None: no windowed layer)
    key_dim: int  # per key-value head
    value_dim: int


@dataclass(frozen=True)
class AttentionLayout:
    """What only the library knows of a full-size model's attention (`Adapter.attention_layout`):
    the heads tensor parallelism must divide and, for a model that generates, its KV cache."""

    heads: int | None = None  # attention (query) heads; None: the config names none
    kv_heads: int | None = None  # key-value heads (the heads where the config names none)
    kv_cache: KVCacheLayout | None = None  # None: no cache, or a config that does not say


@dataclass(frozen=True)
class LoraTargets:
    """The layers LoRA adapts by default (`Adapter.lora_targets`): the last names of the
    modules the library's LoRA targets for the model (None: every Linear layer, as peft's
    `all-linear`), never one of `excluded` (the output head)."""

    modules: frozenset[str] | None = None
    excluded: tuple[Any, ...] = ()


class NoCompiledGenerate(Exception):
    """The model has no generate with a static KV cache and a compiled forward (the message
    says why: `Adapter.compiled_generate`)."""


class Adapter(ABC):
    """One library: resolve -> shrink -> build -> inputs -> loss -> save/load."""

    library: ClassVar[str]  # the Hub's library_name, exactly
    package: ClassVar[str | None] = None  # import name of the optional package it needs
    extra: ClassVar[str | None] = None  # the pyproject extra that installs it
    config_files: ClassVar[tuple[str, ...]] = ("config.json",)  # what the Hub serves for it
    # What `catalog refresh` asks the Hub for (`allow_patterns`): the files `from_files` reads.
    hub_files: ClassVar[tuple[str, ...]] = ("config.json",)
    install_note: ClassVar[str] = ""  # added to the missing-package message (licence, ...)
    # The config fields `canonical` sets to one value, each with why it changes no op.
    canonical_fields: ClassVar[dict[str, str]] = {}
    # What `build_model` imports: imported before the build budget's build on `meta`, since a
    # module first imported inside `torch.device("meta")` makes its import-time tensors there.
    # The package, and its attribute named as the architecture, are imported anyway.
    build_imports: ClassVar[tuple[str, ...]] = ()
    # Whether a parent that forks model children may import what a build imports
    # (`runners.warm.warm_model`): true where the imports only define Python objects, so that
    # each child does not import them again (transformers' model classes: seconds per child).
    warm_in_parent: ClassVar[bool] = False

    # ----- the optional package -----
    def missing_packages(self) -> list[str]:
        """Import names of the packages this adapter needs that are not installed."""
        names = [self.package] if self.package else []
        return [n for n in names if importlib.util.find_spec(n) is None]

    def require_package(self, model_id: str | None = None) -> None:
        """Raise a `missing_package` ConfigError naming the package (and how to get it)."""
        missing = self.missing_packages()
        if not missing:
            return
        how = (  # the locked route (docs/install.md)
            f"bash scripts/install.sh all,{self.extra}"
            if self.extra
            else f"pip install {missing[0]}"
        )
        note = f" ({self.install_note})" if self.install_note else ""
        raise ConfigError(  # the message names the command too: it is what a row keeps
            f"{self.library} models need the {', '.join(missing)} package, which is not "
            f"installed{note}: {how}",
            reason=SkipReason.MISSING_PACKAGE.value,
            model_id=model_id,
            hint=how,
        )

    # ----- which catalog entries it takes -----
    def claims_untagged(self, entry: CatalogEntry) -> bool:
        """An entry with no library on the Hub that is nonetheless this library's model."""
        return False

    # ----- resolve -----
    @abstractmethod
    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        """Offline: the library's own defaults for the architecture the entry names, labelled
        with where they came from. Raises ConfigError (no_config, ...) when it cannot tell."""

    def from_files(self, model_id: str, folder: Path, source: str) -> ResolvedConfig | None:
        """The config from files the Hub serves for this library, cached in `folder`, or None."""
        for name in self.config_files:
            path = folder / name
            if path.is_file():
                return ResolvedConfig(
                    model_id=model_id,
                    library=self.library,
                    config=read_json(path, model_id=model_id),
                    source=source,
                    detail=str(path),
                )
        return None

    # ----- shrink, build, feed, train -----
    @abstractmethod
    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        """The tiny spec (raises ConfigError for a skip, ShrinkError for a shrinker failure)."""

    def canonical(self, spec: TinySpec) -> TinySpec:
        """`spec` with each field of `canonical_fields` set to one value, so that tiny models
        that differ only there are one task (one key); `model_configs.shrink` applies it to
        what `shrink` returns. Default: `spec` unchanged."""
        return spec

    @abstractmethod
    def build_model(self, spec: TinySpec) -> Any:
        """fp32, on the CPU, weights from a fixed seed, eval mode."""

    @abstractmethod
    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        """CPU tensors for `model(**inputs)` (purpose "generate": for `model.generate`)."""

    @abstractmethod
    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        """A scalar whose gradient reaches the model's parameters."""

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        """Save with safetensors and load back into a model built from the same spec."""
        from safetensors.torch import load_file, save_file

        path = folder / "model.safetensors"
        # every entry its own tensor (buffers two modules share, tied weights)
        state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(path))
        fresh = self.build_model(spec)
        fresh.load_state_dict(load_file(str(path)), strict=True)
        return fresh.eval()

    def to_dtype(self, spec: TinySpec, model: Any, dtype: Any) -> Any:
        """The loaded model in the run's dtype (its floating-point tensors cast)."""
        return model.to(dtype)

    # ----- sharding (the distributed stages) -----
    def no_split_modules(self, model: Any) -> list[str]:
        """The class names of the blocks the model can be split at (FSDP shards each one):
        the `_no_split_modules` of the first module that declares them (transformers and
        diffusers models do, also inside another library's wrapper); none: no block."""
        for module in model.modules():
            names = getattr(module, "_no_split_modules", None)
            if names:
                return [str(n) for n in names]
        return []

    def tensor_parallel_plan(self, model: Any) -> dict[str, str] | None:
        """The library's tensor-parallel plan for the model (module pattern -> style), None
        where the library has none for it."""
        return None

    def save_for_tensor_parallel(self, spec: TinySpec, model: Any, folder: Path) -> None:
        """Save `model` into `folder` for `load_tensor_parallel` (before the process group
        exists: libraries save only on its rank 0)."""
        raise NotImplementedError(f"{self.library} offers no tensor-parallel loading")

    def load_tensor_parallel(
        self, spec: TinySpec, model: Any, folder: Path, world_size: int
    ) -> Any:
        """The model saved in `folder`, loaded sharded by its tensor-parallel plan over the
        `world_size` ranks of this process's group, the way the library offers it (`model`:
        the same model, unsharded, for its class and dtype)."""
        raise NotImplementedError(f"{self.library} offers no tensor-parallel loading")

    # ----- at full size (sizing/measure.py) -----
    def full_size_spec(self, resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
        """The spec of `spec`'s model (its class, the part it runs) with the model's own
        unshrunk config from `resolved`, for `sizing.measure` to build on the `meta`
        device with `build_model`. Default: NotSizable (a library that shrinks inside its
        build or builds from other files cannot say)."""
        raise NotSizable(f"no full-size builder for {self.library} models")

    def attention_layout(self, model: Any, *, kv_cache: bool) -> AttentionLayout:
        """The attention heads of `model` (built from `full_size_spec`) and, with `kv_cache`
        (a model that generates), the layers its KV cache spans, read from its config the
        library's way. Default: nothing known (no heads to divide, no cache)."""
        return AttentionLayout()

    def lora_targets(self, model: Any) -> LoraTargets:
        """The modules of `model` LoRA adapts at the library's default settings. Default:
        every Linear layer."""
        return LoraTargets()

    # ----- generate compiled (the generate_compiled stage) -----
    def compiled_generate(
        self, model: Any, *, backend: Any, dynamic: bool | None
    ) -> dict[str, Any]:
        """The `generate` arguments that decode with a static KV cache and the forward
        compiled by `torch.compile(backend=backend, dynamic=dynamic)`, the library's own way;
        raises NoCompiledGenerate where the library or the model has none (the default)."""
        raise NoCompiledGenerate(
            f"{self.library} models have no generate with a static cache and a compiled forward"
        )

    # ----- the model's own implementation switches -----
    def implementation_switches(self, spec: TinySpec) -> dict[str, str]:
        """The documented switches of the model's own code it can be built with (switch ->
        the value it takes by default), e.g. transformers' `experts_implementation`; none by
        default."""
        return {}

    def set_implementation(self, model: Any, switch: str, value: str) -> None:
        """Run the loaded model with `switch=value` (one of `implementation_switches`)."""
        raise ValueError(f"{self.library} models have no implementation switch {switch!r}")

    # ----- helpers the adapters share -----
    def library_default(self, model_id: str, config: dict[str, Any], detail: str = "") -> Any:
        """A config from the library's own bundled defaults, labelled so."""
        return ResolvedConfig(
            model_id=model_id,
            library=self.library,
            config=config,
            source=ConfigSource.LIBRARY_DEFAULT.value,
            detail=detail,
        )

    # ----- coverage -----
    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        """One default config per architecture the library offers (for the coverage bench)."""
        return iter(())

    def known_failures(self) -> dict[str, dict[str, Any]]:
        """Architectures that do not pass, each with a reason and a kind of cause (the
        `known_failures` table of the library's `data/tables.json`)."""
        table = library_tables(inspect.getfile(type(self))).get("known_failures", {})
        return {k: v for k, v in table.items() if not k.startswith("_")}


def config_int(config: Any, name: str) -> int | None:
    """`config.name` where it is a positive int (a size a config names), else None."""
    try:
        value = getattr(config, name, None)
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def no_config(message: str, model_id: str | None) -> ConfigError:
    """The `no_config` skip: nothing offline says what this repo's model is."""
    return ConfigError(message, reason=SkipReason.NO_CONFIG.value, model_id=model_id)


def find_class(
    name: str,
    modules: tuple[str, ...],
    *,
    where: str,
    model_id: str | None = None,
    after_import: Any = None,
) -> Any:
    """The class `name` from the first of these modules that has it (a module that does not
    import is passed over); a `no_model_class` skip naming `where` otherwise. Only these
    modules are looked in: a repo never names the code that is run."""
    import importlib

    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        finally:
            if after_import is not None:
                after_import()
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            return cls
    raise ConfigError(
        f"{name!r} is not a class of {where}",
        reason=SkipReason.NO_MODEL_CLASS.value,
        model_id=model_id,
    )


def read_json(path: Path, *, model_id: str) -> dict[str, Any]:
    return read_config_file(path, model_id=model_id)


def library_tables(module_file: str) -> dict[str, Any]:
    """The tables of the library whose package holds `module_file` (pass `__file__`): its
    `data/tables.json` (name mappings, stand-ins, known failures, each with a reason), or {}."""
    path = Path(module_file).resolve().parent / TABLES
    return json.loads(path.read_text()) if path.is_file() else {}


def save_pretrained_round_trip(model: Any, folder: Path) -> Any:
    """The library's own save (safetensors) and load, as users do it (`save_pretrained` /
    `from_pretrained`: transformers, diffusers, Chronos)."""
    with tempfile.TemporaryDirectory(prefix="hfsweep-save-", dir=folder) as tmp:
        model.save_pretrained(tmp)
        if not any(p.suffix == ".safetensors" for p in Path(tmp).rglob("*")):
            raise RuntimeError("save_pretrained wrote no safetensors file")
        return type(model).from_pretrained(tmp).eval()


def repo_name(model_id: str) -> str:
    """`org/name` -> `name`."""
    return model_id.rsplit("/", 1)[-1]
