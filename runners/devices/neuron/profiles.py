"""Device profiles: which ATen ops the neuron device runs natively, read from data files.

The bundled profiles live in `runners/devices/neuron/data/profiles/` (its README gives their provenance). The
default, `torchneuron-2026-04-21`, is TorchNeuron's own registrations, read from a snapshot of
its source; `torch-mlir` and `torch-xla` are public lowering lists kept as selectable stand-ins.
A user profile is any text file of op names, one per line.

Besides its op list a profile carries the device's rules, also from the snapshot: the view ops
that are never fallbacks, the ops routed to the CPU on purpose (fallbacks whatever a list says),
the ops that are native only for some inputs, the eager Torch-MLIR kernels (their dtype and
layout rules) and the ops that raise on a non-scalar host tensor. What the compiler lowers is
not a profile's: the evidence (`evidence.py`) is the same under every profile, and its digest
is part of every profile's hash. `DeviceProfile.classify` names the class of
any ATen op (`OpClass`) from that data alone; the emulated device and the op-level sweep use it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ground.errors import DeviceError
from runners.devices.aten_names import base_name, overload_name

PROFILE_DIR = Path(__file__).resolve().parent / "data" / "profiles"
SNAPSHOT = "torchneuron-2026-04-21"  # TorchNeuron source snapshot, commit 98154b8 (2026-04-21)
DEFAULT_PROFILE = SNAPSHOT
ALIASES = {"torchneuron": SNAPSHOT}


class OpClass(str, enum.Enum):
    """What the device does with one ATen op, as the profile's data says."""

    NATIVE = "native"  # a native kernel (or, for lowering lists, a native lowering)
    VIEW = "view"  # metadata only: never a fallback
    ROUTED_TO_CPU = "routed_to_cpu"  # the backend computes it on the host on purpose
    CONDITIONAL = "conditional"  # native for some inputs; the others fall back (or raise)
    FALLBACK = "fallback"  # no native kernel: the boxed CPU fallback runs it

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BundledProfile:
    """Where a bundled profile's data lives (paths relative to PROFILE_DIR)."""

    ops: tuple[str, ...]
    exact: bool = False  # ops are registrations, matched overload for overload
    conditional: tuple[str, ...] = ()
    description: str = ""


_SNAPSHOT_DIR = SNAPSHOT
_TORCH_MLIR = ("torch-mlir-stablehlo-direct.txt", "torch-mlir-decomposed.txt")

BUNDLED: dict[str, BundledProfile] = {
    SNAPSHOT: BundledProfile(
        ops=(f"{_SNAPSHOT_DIR}/native-ops.txt",),
        exact=True,
        conditional=(f"{_SNAPSHOT_DIR}/conditional-ops.txt",),
        description="TorchNeuron's native registrations (torch_neuronx snapshot, 2026-04-21)",
    ),
    "torch-mlir": BundledProfile(
        ops=_TORCH_MLIR, description="Torch-MLIR to StableHLO lowerings (direct + decomposed)"
    ),
    "torch-mlir-stablehlo-direct": BundledProfile(ops=(_TORCH_MLIR[0],)),
    "torch-mlir-decomposed": BundledProfile(ops=(_TORCH_MLIR[1],)),
    "torch-xla": BundledProfile(ops=("torch-xla-native.txt",), description="torch_xla lowerings"),
}

# The device's own rules (the snapshot's), whatever op list a profile uses.
VIEWS_FILE = f"{_SNAPSHOT_DIR}/view-ops-whitelist.txt"
ROUTED_FILE = f"{_SNAPSHOT_DIR}/cpu-fallback-explicit.txt"
MLIR_KERNELS_FILE = f"{_SNAPSHOT_DIR}/mlir-kernels.txt"
HOST_ARGS_FILE = f"{_SNAPSHOT_DIR}/host-args-raise.txt"
PYTHON_KERNELS_FILE = f"{_SNAPSHOT_DIR}/python-kernels.txt"


@functools.lru_cache(maxsize=4096)
def schema_is_view(op: str) -> bool:
    """Whether the ATen op named `op` returns an alias of an input without writing it."""
    import torch

    namespace, _, rest = op.partition("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), base, None)
    if packet is None:
        return False
    try:
        schema = getattr(packet, overload or "default")._schema
    except AttributeError:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


@dataclass(frozen=True)
class DeviceProfile:
    """A named set of native ops, with the device's rules.

    `exact` profiles hold registrations (TorchNeuron's): an op is native when that very
    overload is registered; the dispatcher itself maps an unregistered functional or in-place
    form to a registered `.out` kernel, as it does for a real backend. Other profiles hold
    lowering lists, matched by base name (`aten::add.Tensor` declares `aten::add.out`).
    """

    name: str
    ops: frozenset[str]
    source: str = ""  # where it was read from, for messages
    exact: bool = False
    views: frozenset[str] = frozenset()
    routed_to_cpu: frozenset[str] = frozenset()
    conditional: frozenset[str] = frozenset()
    mlir_kernels: frozenset[str] = frozenset()  # eager Torch-MLIR kernels (dtype, layout rules)
    host_args_raise: frozenset[str] = frozenset()  # raise on a non-scalar host tensor argument
    python_kernels: frozenset[str] = frozenset()  # served in Python: fresh, contiguous outputs
    description: str = ""
    _bases: frozenset[str] = field(init=False, repr=False, compare=False)
    _view_bases: frozenset[str] = field(init=False, repr=False, compare=False)
    _routed_bases: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "ops", frozenset(overload_name(op) for op in self.ops))
        set_(self, "_bases", frozenset(base_name(op) for op in self.ops))
        set_(self, "_view_bases", frozenset(base_name(op) for op in self.views))
        bare = (op for op in self.routed_to_cpu if "." not in op.partition("::")[2])
        set_(self, "_routed_bases", frozenset(base_name(op) for op in bare))

    @property
    def hash(self) -> str:
        """sha256 (16 hex digits) of everything that decides a classification, and of the
        compile evidence (the same for every profile)."""
        from runners.devices.neuron.evidence import evidence_sets

        parts = [f"exact={self.exact}", *sorted(self.ops)]
        for label, ops in (
            ("views", self.views),
            ("routed_to_cpu", self.routed_to_cpu),
            ("conditional", self.conditional),
            ("mlir_kernels", self.mlir_kernels),
            ("host_args_raise", self.host_args_raise),
            ("python_kernels", self.python_kernels),
        ):
            if ops:
                parts += [f"[{label}]", *sorted(ops)]
        parts += ["[compile evidence]", evidence_sets().digest]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    # -- eager ------------------------------------------------------------------------------

    def declares(self, op: str) -> bool:
        """The op list names `op` (exactly, or by base name for lowering lists)."""
        op = overload_name(op)
        if self.exact:
            return op in self.ops
        return op in self.ops or base_name(op) in self._bases

    def is_routed_to_cpu(self, op: str) -> bool:
        """An entry with an overload matches that overload; a bare entry (the default
        overload) also matches its other overloads (`aten::_linalg_eigh.eigenvalues`)."""
        op = overload_name(op)
        return op in self.routed_to_cpu or base_name(op) in self._routed_bases

    def is_view(self, op: str) -> bool:
        """A view op: its schema returns an alias, or the snapshot's whitelist names it."""
        op = overload_name(op)
        return op in self.views or base_name(op) in self._view_bases or schema_is_view(op)

    def is_conditional(self, op: str) -> bool:
        return overload_name(op) in self.conditional and self.declares(op)

    def is_native(self, op: str) -> bool:
        """Declared and not routed to the CPU (views aside: see `classify`)."""
        return self.declares(op) and not self.is_routed_to_cpu(op)

    def classify(self, op: str) -> OpClass:
        """The class of the ATen op named `op` (`aten::name.overload`) on this device."""
        if self.is_view(op):
            return OpClass.VIEW
        if self.is_routed_to_cpu(op):
            return OpClass.ROUTED_TO_CPU
        if self.is_conditional(op):
            return OpClass.CONDITIONAL
        if self.declares(op):
            return OpClass.NATIVE
        return OpClass.FALLBACK

    def is_mlir_kernel(self, op: str) -> bool:
        """A native op served by an eager Torch-MLIR kernel (its dtype and layout rules)."""
        return overload_name(op) in self.mlir_kernels

    def has_fresh_outputs(self, op: str) -> bool:
        """A native op served by a Python implementation: its outputs are fresh contiguous
        tensors (a functional call's)."""
        return overload_name(op) in self.python_kernels

    def raises_on_host_args(self, op: str) -> bool:
        """A native op whose first implementation raises on a non-scalar host tensor."""
        return overload_name(op) in self.host_args_raise

    @classmethod
    def from_ops(cls, name: str, ops: set[str] | frozenset[str] | list[str]) -> DeviceProfile:
        """A lowering list given in memory, with the device's rules."""
        rules = device_rules()
        return cls(
            name=name,
            ops=frozenset(ops),
            source="<in memory>",
            views=rules.views,
            routed_to_cpu=rules.routed_to_cpu,
            mlir_kernels=rules.mlir_kernels,
            host_args_raise=rules.host_args_raise,
            python_kernels=rules.python_kernels,
        )


def classify(op: str, profile: DeviceProfile | str | None = None) -> OpClass:
    """`classify("aten::histc")` -> OpClass.NATIVE under the default profile."""
    if not isinstance(profile, DeviceProfile):
        profile = load_profile(profile)
    return profile.classify(op)


def _read_ops(path: Path) -> set[str]:
    ops: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            ops.add(line if "::" in line else f"aten::{line}")
    return ops


def _read_all(files: tuple[str, ...]) -> frozenset[str]:
    ops: set[str] = set()
    for filename in files:
        ops |= _read_ops(PROFILE_DIR / filename)
    return frozenset(ops)


@dataclass(frozen=True)
class DeviceRules:
    """The snapshot's device-wide rules: views never fall back, some ops go to the CPU, the
    Torch-MLIR kernels' dtype and layout rules, host arguments that raise."""

    views: frozenset[str]
    routed_to_cpu: frozenset[str]
    mlir_kernels: frozenset[str]
    host_args_raise: frozenset[str]
    python_kernels: frozenset[str]


@functools.lru_cache(maxsize=1)
def device_rules() -> DeviceRules:
    return DeviceRules(
        views=_read_all((VIEWS_FILE,)),
        routed_to_cpu=_read_all((ROUTED_FILE,)),
        mlir_kernels=frozenset(overload_name(op) for op in _read_all((MLIR_KERNELS_FILE,))),
        host_args_raise=frozenset(overload_name(op) for op in _read_all((HOST_ARGS_FILE,))),
        python_kernels=frozenset(overload_name(op) for op in _read_all((PYTHON_KERNELS_FILE,))),
    )


@functools.lru_cache(maxsize=32)
def _load_bundled(name: str) -> DeviceProfile:
    spec = BUNDLED[name]
    return DeviceProfile(
        name=name,
        ops=_read_all(spec.ops),
        source=str(PROFILE_DIR),
        exact=spec.exact,
        conditional=_read_all(spec.conditional),
        description=spec.description,
        views=device_rules().views,
        routed_to_cpu=device_rules().routed_to_cpu,
        mlir_kernels=device_rules().mlir_kernels,
        host_args_raise=device_rules().host_args_raise,
        python_kernels=device_rules().python_kernels,
    )


def profile_names() -> list[str]:
    return sorted(BUNDLED)


def load_profile(profile: str | Path | None = None) -> DeviceProfile:
    """A bundled profile by name (default: the TorchNeuron snapshot's) or a user's file."""
    if profile is None:
        profile = DEFAULT_PROFILE
    if isinstance(profile, str):
        profile = ALIASES.get(profile, profile)
        if profile in BUNDLED:
            return _load_bundled(profile)
    path = Path(profile)
    if not path.is_file():
        raise DeviceError(
            f"Device profile {str(profile)!r} is neither a bundled profile nor a file.",
            hint=f"Use one of {', '.join(profile_names())} or a path to a text file of op names.",
        )
    loaded = DeviceProfile.from_ops(path.stem, _read_ops(path))
    return dataclasses.replace(loaded, source=str(path))
