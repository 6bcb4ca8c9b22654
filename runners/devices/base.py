"""The device interface every backend implements (the registry in `__init__.py` names them).

A device knows how to put a model and its inputs on itself, how `torch.compile` runs on it
(`compile_options`, and `compiling` around a compile stage), how each ATen op runs on it
(`classify_op`), what its model processes need in their environment before torch loads
(`process_env`), and how to record the ops that fell back to the CPU while a stage ran.
Device-specific handling (re-tying weights after `.to()`, storage moves for save/load) lives
here, never in stages. Importing this module does not import torch (the registry reads
`process_env` before a model process loads it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import inspect
from abc import ABC
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ground.errors import DeviceError
from runners.devices import collective_log
from runners.devices.collective_log import CollectiveLog
from runners.devices.options import DeviceOption

if TYPE_CHECKING:
    import torch


class FallbackDisallowed(DeviceError):
    """Strict mode: an op ran (or would run) on the CPU. `op` names it (`aten::x.overload`)."""

    environment = False  # the model's own result (a `fail` naming the op), not the machine's

    def __init__(self, message: str | None = None, *, op: str, **fields: Any):
        super().__init__(
            message or f"{op} has no native kernel on the device and CPU fallback is disabled",
            op=op,
            hint=fields.pop("hint", None)
            or "Run without strict mode to let it fall back, or add the op to the device profile.",
            **fields,
        )
        self.op = op


@dataclass
class OpFallback:
    count: int = 0
    bytes_h2d: int = 0
    bytes_d2h: int = 0


@dataclass
class FallbackLog:
    """What fell back to the CPU during one stage, per ATen op (`aten::name.overload`)."""

    ops: dict[str, OpFallback] = field(default_factory=dict)
    copy_bytes_h2d: int = 0  # explicit host -> device copies (inputs, .to())
    copy_bytes_d2h: int = 0
    compile_ops: dict[str, OpFallback] = field(default_factory=dict)  # unlowerable graph ops
    executed: dict[str, int] = field(default_factory=dict)  # native calls per op, where known
    classes: dict[str, str] = field(default_factory=dict)  # op -> OpClass the device applied
    declined: dict[str, str] = field(default_factory=dict)  # op -> why a native kernel declined

    def record(self, op: str, *, bytes_h2d: int = 0, bytes_d2h: int = 0, n: int = 1) -> None:
        entry = self.ops.setdefault(op, OpFallback())
        entry.count += n
        entry.bytes_h2d += bytes_h2d
        entry.bytes_d2h += bytes_d2h

    def record_compile(self, op: str, n: int = 1) -> None:
        self.compile_ops.setdefault(op, OpFallback()).count += n

    @property
    def op_count(self) -> int:
        return len(set(self.ops) | set(self.compile_ops))

    @property
    def call_count(self) -> int:
        return sum(e.count for e in self.ops.values()) + sum(
            e.count for e in self.compile_ops.values()
        )

    @property
    def bytes_h2d(self) -> int:
        return self.copy_bytes_h2d + sum(e.bytes_h2d for e in self.ops.values())

    @property
    def bytes_d2h(self) -> int:
        return self.copy_bytes_d2h + sum(e.bytes_d2h for e in self.ops.values())


# The logs of the stages running now, innermost last. Process-wide on purpose: the autograd engine
# runs a non-CPU device's backward on its own thread, and those fallbacks belong to the stage too.
_ACTIVE_LOGS: list[FallbackLog] = []


@functools.cache
def torch_version() -> str | None:
    """The installed torch's release (`2.14.1`, without a build's local part), read from its
    metadata: a driver that loads no torch still names it."""
    try:
        return importlib.metadata.version("torch").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def active_fallback_logs() -> list[FallbackLog]:
    """The logs recording right now (empty outside `Device.record_fallbacks`)."""
    return _ACTIVE_LOGS


@contextlib.contextmanager
def collecting(log: FallbackLog) -> Iterator[FallbackLog]:
    """Make `log` receive fallbacks (eager and compile) while the block runs."""
    _ACTIVE_LOGS.append(log)
    try:
        yield log
    finally:
        _ACTIVE_LOGS.remove(log)


@dataclass(frozen=True)
class CompileOptions:
    """How `torch.compile` runs on a device."""

    backend: str = "inductor"
    mode: str | None = None  # what the backend does with a graph op it cannot lower (if anything)
    dynamic: bool | None = None  # None: torch.compile's own default


# How an ATen op runs on a device (`Device.classify_op`), the words the op sweep records:
OP_CLASSES = ("native", "view", "routed_to_cpu", "conditional", "fallback")


class Device(ABC):
    """One PyTorch device. Subclasses set `name`; instances are cheap, `setup()` does the work."""

    name: ClassVar[str]
    emulated: ClassVar[bool] = False
    compile_backend: str = "inductor"
    compile_mode: str | None = None  # what the compile backend does with an unlowerable op
    compile_dynamic: ClassVar[bool | None] = None  # the backend's `dynamic` (None: default)
    availability_hint: ClassVar[str] = ""  # what to do when `is_available()` is False
    # keywords of its constructor beyond `strict`, given on the command line (options.py)
    options: ClassVar[tuple[DeviceOption, ...]] = ()
    # strings only this device knows (its environment variables, error texts); no product file
    # outside its folder may hold them, nor its options' flags (tests/test_architecture.py)
    knowledge: ClassVar[tuple[str, ...]] = ()
    # Modules a model process imports for this device on first use: a parent that forks its
    # model processes imports them once, before forking (`runners.warm.warm_parent`).
    preload_modules: ClassVar[tuple[str, ...]] = ()
    # The torch.distributed backend a group of this device's ranks uses (None: no group).
    process_group_backend: ClassVar[str | None] = None
    # Its process group says which collective a rank is inside until it returns (a group's
    # launcher then tells a rank waiting in one from a rank still computing).
    collective_waits: ClassVar[bool] = False

    def __init__(self, *, strict: bool = False, profile: str | None = None):
        self.strict = strict  # a CPU fallback raises instead of running (where supported)
        self.profile = profile

    @classmethod
    def create(cls, **options: Any) -> Device:
        """The device the registry builds for these options (a subclass may pick another)."""
        return cls(**options)

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def data_file(cls, name: str) -> Path | None:
        """`name` in the device's own folder's `data/` (the folder of the module that defines
        the class: `runners/devices/<name>/`), None where it has no such file."""
        path = Path(inspect.getfile(cls)).resolve().parent / "data" / name
        return path if path.is_file() else None

    @classmethod
    def process_env(cls, options: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Environment variables the model processes need set before torch is imported there
        (PyTorch reads some when it loads). Called without importing torch."""
        return {}

    def compile_options(self) -> CompileOptions:
        """The `torch.compile` backend, the mode of its unlowerable ops, and `dynamic`."""
        return CompileOptions(self.compile_backend, self.compile_mode, self.compile_dynamic)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[dict[str, Any]]:
        """Around a compile stage: yields a dict that the device's compiler fills, by the time
        the block exits (also when it raises), with row columns it knows (`partition_count`,
        `compile_evidence`, `unverified_ops`). Nothing for compilers that report nothing."""
        yield {}

    def autocast_policy_file(self) -> Path | None:
        """The device's autocast policy as data (`runners.autocast_policy`'s format): the amp
        stage's CPU reference casts as it says. None: the reference uses the CPU's own autocast
        lists (a device whose policy is not bundled as data)."""
        return None

    def classify_op(self, op: str) -> str | None:
        """How the ATen op `op` (`aten::name.overload`) runs here, one of `OP_CLASSES`, or None
        where the device declares nothing."""
        return None

    def setup(self) -> None:
        """Make the device usable in this process (idempotent)."""
        return None

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.name)

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move a model to the device, repairing what the move breaks: tied weights. Moving to a
        backend whose tensors PyTorch cannot shallow-copy into CPU ones (PrivateUse1: neuron,
        the emulator) gives every module a Parameter of its own, so a parameter shared by
        several modules (a T5 inside a sentence-transformers wrapper, which has no
        `tie_weights` of its own) would be untied; each is shared again as it was on the CPU."""
        shared = shared_parameters(model)
        model = model.to(self.torch_device)
        for places in shared:
            owner, name = places[0]
            for module, other in places[1:]:
                module._parameters[other] = owner._parameters[name]
        tie = getattr(model, "tie_weights", None)
        if callable(tie):
            tie()
        return model

    def to_device(self, obj: Any) -> Any:
        """Move tensors (also inside mappings, lists, tuples) to the device. Mappings that are
        not dicts (transformers' BatchEncoding / BatchFeature) come back as plain dicts."""
        import torch

        if isinstance(obj, torch.Tensor):
            return obj.to(self.torch_device)
        if isinstance(obj, Mapping):
            return {k: self.to_device(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.to_device(v) for v in obj)
        return obj

    def synchronize(self) -> None:
        """Wait for queued work (no-op on synchronous devices)."""
        return None

    @contextlib.contextmanager
    def record_fallbacks(self) -> Iterator[FallbackLog]:
        """Record CPU fallbacks while the block runs. Devices without fallbacks record none
        (except ops a compile backend reports as unlowerable)."""
        with collecting(FallbackLog()) as log:
            yield log

    def peak_memory_bytes(self) -> int | None:
        return None

    def reset_peak_memory(self) -> None:
        return None

    def profile_info(self) -> tuple[str | None, str | None]:
        """(profile name, profile hash) of the native-op set, for emulated devices."""
        return None, None

    def profile_torch(self) -> str | None:
        """The torch version the device's profile was written for (None: no profile, or one
        that names none)."""
        return None

    def fallback_evidence(self, op: str) -> str | None:
        """What a CPU fallback of `op` rests on where it is not the device's own word
        (`CompileEvidence`; None: it is)."""
        return None

    def identity(self) -> dict[str, Any]:
        """The columns that say which device a row ran on, the same in every table and in the
        run's row: its name, whether it is emulated, its profile and the profile's hash, the
        torch the profile was written for and the torch it runs on."""
        profile, digest = self.profile_info()
        return {
            "device": self.name,
            "device_emulated": bool(self.emulated),
            "device_profile": profile,
            "device_profile_hash": digest,
            "device_profile_torch": self.profile_torch(),
            "device_torch": torch_version(),
        }

    def versions(self) -> dict[str, str]:
        """Software versions that matter for this device (the device package, driver...)."""
        return {}

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return True

    # Whether the device can pin host memory for its copies (a DataLoader's `pin_memory=True`,
    # transformers' Trainer's default); False: the hf_training stages say so in their row and
    # load batches unpinned.
    pins_host_memory: ClassVar[bool] = True

    def present_to_libraries(self) -> None:
        """Make Hugging Face's own device detection (transformers' `TrainingArguments`,
        accelerate's `PartialState`) find this device in this process, as it finds it where the
        device's own package is installed. Called by the hf_training stages only, in the
        model's process or a rank; the default: the libraries find it by themselves."""
        return None

    # ---- a rank of a process group (the distributed stages) -------------------------------

    @classmethod
    def ranks_available(cls) -> int:
        """How many ranks of this device one machine holds, one process each (0: none)."""
        return 0

    @classmethod
    def rank_resources(cls, world_size: int) -> dict[str, Any]:
        """What a task whose stages run `world_size` ranks asks Ray for (`.options(...)`), so
        that two such tasks never oversubscribe a node: a CPU per rank, by default."""
        return {"num_cpus": world_size}

    def setup_rank(self, rank: int, world_size: int) -> None:
        """Make this process rank `rank` of `world_size` (after `setup`): its device, and
        whatever its process group needs registered."""
        return None

    @contextlib.contextmanager
    def record_collectives(self) -> Iterator[CollectiveLog]:
        """Count this process's collectives while the block runs: torch's own process groups
        call c10d's hooks, which this registers on the default group (a device whose group
        reports its collectives itself overrides it)."""
        import torch.distributed as dist

        log = CollectiveLog()
        group = dist.group.WORLD if dist.is_initialized() else None
        if group is None:
            yield log
            return
        hook_id = id(log)

        def started(args: Any) -> None:
            name = str(args.name).rsplit(".", 1)[-1].lower()
            nbytes = sum(t.numel() * t.element_size() for t in args.input_tensors)
            collective_log.record(f"{collective_log.PREFIX}{name}", nbytes)

        group.register_pre_hook(hook_id, started)
        try:
            with collective_log.collecting(log):
                yield log
        finally:
            group.unregister_pre_hook(hook_id)

    def collective_evidence(self, op: str) -> str | None:
        """What a verdict about collective or DTensor op `op` on this device rests on
        (`ground.schema.CompileEvidence`), or None where the device declares nothing."""
        return None

    def fallback_error(self, log: FallbackLog) -> Exception | None:
        """In strict mode, the failure a stage's recorded fallbacks make (for devices that only
        learn of fallbacks after the stage ran; the emulated device raises at the op)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, emulated={self.emulated})"


def shared_parameters(model: torch.nn.Module) -> list[list[tuple[torch.nn.Module, str]]]:
    """The (module, name) places of each parameter that several places hold."""
    places: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                places.setdefault(id(param), []).append((module, name))
    return [p for p in places.values() if len(p) > 1]
