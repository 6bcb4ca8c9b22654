"""The CLI's shared options, declared once as groups, and the settings built from them once.

- `add_store_argument`: `--store`, for every command that reads or writes the store, and
  `store_to_read` / `store_to_write`: a store to read must be a folder that exists (or a URI),
  one to write into must not be a file; each answers one clear error (exit 2);
- `add_job_arguments` / `job_settings`: `--store`, `--run-id`, `--address`, `--num-cpus`,
  `--local`, `--retries`, `--no-report` (the sweeps: `run`, `ops`);
- `add_device_arguments` / `device_choice`: `--device`, the options the devices declare
  (`runners.devices.device_options`), and `--strict` where it
  applies (`run`, `check`, `ops`);
- `add_limit_arguments`: `--timeout` and `--memory-limit` (each command says per what);
- `add_model_arguments` / `model_settings`: the model task's settings (`run`, `check`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ground import settings
from ground.errors import UsageError
from ground.schema import Stage
from runners import stages as stage_registry
from runners.settings import (
    ALTERNATIVES_MODES,
    DEFAULT_WORLD_SIZE,
    DTYPE_NAMES,
    DeviceChoice,
    ModelSettings,
    dtype_names,
)
from sweep.settings import JobSettings


def add_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=settings.default_store(),
        help="results folder or URI (default: $HFSWEEP_STORE or ./hfsweep-store)",
    )


def _local(root: str) -> Path | None:
    """The folder a store root names, None for an object-store URI (checked when opened)."""
    if "://" in root and not root.startswith("file://"):
        return None
    return Path(root.removeprefix("file://")).expanduser()


def store_to_read(root: str) -> str:
    """`root`, if it can hold results to read: a folder that exists, or a URI."""
    path = _local(root)
    if path is None:
        return root
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"--store {root!r} is a file, not a store folder",
            hint="give the folder `hfsweep run --store` wrote (it holds results/ and runs/)",
        )
    if not path.exists():
        raise UsageError(
            f"--store {root!r}: no such folder",
            hint="give the folder `hfsweep run --store` wrote (default: $HFSWEEP_STORE or "
            "./hfsweep-store), or run `hfsweep run` first",
        )
    return root


def store_to_write(root: str) -> str:
    """`root`, if a run can write into it: a folder (created if missing) or a URI, not a file."""
    path = _local(root)
    if path is not None and path.exists() and not path.is_dir():
        raise UsageError(
            f"--store {root!r} is a file, not a store folder",
            hint="give a folder (it is created if missing) or a URI such as s3://bucket/prefix",
        )
    return root


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("the run")
    add_store_argument(group)  # type: ignore[arg-type]
    group.add_argument("--run-id", help="name the run; an existing run id resumes it")
    group.add_argument("--address", help="an existing Ray cluster (e.g. 127.0.0.1:6379 or auto)")
    group.add_argument(
        "--num-cpus", type=int, help="size of the embedded local Ray (default: cores)"
    )
    group.add_argument(
        "--local",
        action="store_true",
        help="no Ray: run tasks one by one in child processes of this one",
    )
    group.add_argument(
        "--retries",
        type=int,
        default=2,
        help="retries of a task the environment stopped (a lost worker or node, a device that "
        "fails to set up); never of a model's or a sample's own failure (default 2)",
    )
    group.add_argument(
        "--no-report", action="store_true", help="do not print the summary at the end"
    )


def job_settings(args: argparse.Namespace) -> JobSettings:
    return JobSettings(
        store=args.store,
        run_id=args.run_id,
        executor="local" if args.local else "ray",
        address=args.address,
        num_cpus=args.num_cpus,
        retries=args.retries,
        report=not args.no_report,
        command=command_line(),
    )


def add_device_arguments(p: argparse.ArgumentParser, *, strict: bool = True) -> None:
    from runners.devices import device_names

    group = p.add_argument_group("the device")
    group.add_argument("--device", default="cpu", help=f"{', '.join(device_names())} (default cpu)")
    _add_device_options(group, "device")
    if strict:
        group.add_argument("--strict", action="store_true", help="a CPU fallback is an error")


def _add_device_options(group: Any, where: str) -> None:
    """The options the registered devices declare for `where` (`device` or `model`)."""
    from runners.devices import device_options

    for option in device_options(where):
        group.add_argument(
            option.flag, dest=option.keyword, choices=option.choices, help=option.help
        )


def _compile_backends() -> str:
    """`inductor on cpu, cuda, ...; X on y`: each registered device's compile backend."""
    from runners.devices import device_class, device_names

    by: dict[str, list[str]] = {}
    for name in device_names():
        by.setdefault(device_class(name).compile_backend, []).append(name)
    return "; ".join(f"{backend} on {', '.join(names)}" for backend, names in by.items())


def device_choice(args: argparse.Namespace) -> DeviceChoice:
    """The device and the options of its own the command line gave (those of its groups the
    command offers)."""
    from runners.devices import device_options

    given = tuple((o.keyword, getattr(args, o.keyword, None)) for o in device_options())
    return DeviceChoice(args.device, strict=bool(getattr(args, "strict", False)), given=given)


def add_limit_arguments(p: argparse.ArgumentParser, *, timeout: float, per: str) -> None:
    group = p.add_argument_group("limits")
    group.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        help=f"seconds per {per} of its own time (waiting for a CPU does not count; "
        f"default {timeout:g})",
    )
    group.add_argument(
        "--memory-limit",
        type=float,
        default=4.0,
        metavar="GIB",
        help=f"host memory each {per} may allocate; past it, it is oom (default 4, 0: none)",
    )


def memory_limit(args: argparse.Namespace) -> int | None:
    if args.memory_limit < 0:
        raise UsageError("--memory-limit must be 0 (no limit) or a size in GiB")
    return int(args.memory_limit * 2**30) or None


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("the model's stages")
    group.add_argument(
        "--dtype",
        default="fp32",
        help=f"{', '.join(DTYPE_NAMES)}, or several comma-separated (fp32,bf16): each model at "
        "each dtype in one run, side by side (default fp32)",
    )
    group.add_argument("--stages", help=stage_registry.stages_help())
    group.add_argument(
        "--world-size",
        type=int,
        default=DEFAULT_WORLD_SIZE,
        metavar="N",
        help="ranks of the distributed stages (ddp, fsdp, tp), one process each on the device "
        f"(default {DEFAULT_WORLD_SIZE})",
    )
    _add_device_options(group, "model")
    group.add_argument(
        "--compile-backend",
        help=f"torch.compile backend (default: the device's: {_compile_backends()})",
    )
    group.add_argument(
        "--alternatives",
        choices=ALTERNATIVES_MODES,
        default="auto",
        help="a model that fails is run again with switches of its own code (transformers' "
        "experts_implementation, attn_implementation) or of its Trainer's arguments "
        "(torch_compile_backend, for trainer_compiled), each as rows of its own: auto (the "
        "default) those its failure's class names (docs/next-steps.md), all, none",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 < value <= 1 << 24:
        raise argparse.ArgumentTypeError(f"must be between 1 and {1 << 24:,}, not {value:,}")
    return value


def add_sizing_arguments(p: argparse.ArgumentParser) -> None:
    """What the full-size serving memory assumes (docs/sizing.md)."""
    from sizing.cores import SERVE_BATCH, SERVE_CONTEXT

    group = p.add_argument_group("at full size (docs/sizing.md)")
    group.add_argument(
        "--serve-context",
        type=_positive_int,
        default=SERVE_CONTEXT,
        help=f"tokens of KV cache per served sequence (default {SERVE_CONTEXT})",
    )
    group.add_argument(
        "--serve-batch",
        type=_positive_int,
        default=SERVE_BATCH,
        help=f"sequences served at once (default {SERVE_BATCH})",
    )


def dtypes(args: argparse.Namespace) -> tuple[str, ...]:
    """The dtypes `--dtype` names (one or several, comma-separated), in the order given."""
    return dtype_names(args.dtype)


def model_settings(args: argparse.Namespace) -> ModelSettings:
    """The model task's settings at the first dtype `--dtype` names (a run of several carries
    the others in `ModelRun.dtypes`)."""
    return ModelSettings(
        device=device_choice(args),
        dtype=dtypes(args)[0],
        stages=tuple(stage_list(args.stages)),
        timeout_s=args.timeout,
        memory_limit=memory_limit(args),
        compile_backend=args.compile_backend,
        world_size=args.world_size,
        alternatives=args.alternatives,
        implementation=getattr(args, "implementation", None),
    )


def stage_list(text: str | None) -> list[Stage]:
    """`--stages`: stage names and group names (each group of the stage registry, `all`),
    comma-separated; none: the default stages. A stage of a group that brings its needs (every
    group but the default's) brings the stages it builds on. Returned once each, in stage
    order."""
    if not text:
        return list(stage_registry.default_stages())
    groups = [g.name for g in stage_registry.stage_groups()] + [stage_registry.ALL]
    wanted: set[Stage] = set()
    for name in text.split(","):
        name = name.strip()
        if name in groups:
            wanted.update(stage_registry.group_stages(name))
            continue
        try:
            stage = Stage(name)
        except ValueError:
            stage = None
        if stage not in stage_registry.declarations():
            raise UsageError(
                f"unknown stage {name!r}; stages: "
                f"{', '.join(s.value for s in stage_registry.stage_order())} "
                f"(or {', '.join(groups)})"
            ) from None
        wanted.add(stage)
    for stage in list(wanted):
        if stage_registry.group_of(stage).brings_needs:
            wanted.update(stage_registry.stage_needs()[stage])
    return [s for s in stage_registry.stage_order() if s in wanted]


def names(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated list (`--models`, `--ops`), or None."""
    if not text:
        return None
    return tuple(n.strip() for n in text.split(",") if n.strip()) or None


def command_line() -> str:
    return " ".join(["hfsweep", *sys.argv[1:]])


def catalog_models(source: str) -> list[Any]:
    """The catalog's entries as the reading side takes them (none when it cannot be read)."""
    from ground.errors import SweepError
    from model_configs.catalog import load_catalog
    from reports.model_search import CatalogModel

    try:
        catalog = load_catalog(source)
    except (SweepError, OSError):
        return []
    return [CatalogModel(e.model_id, e.rank, e.downloads) for e in catalog.entries]
