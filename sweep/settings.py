"""A sweep's settings: one frozen object, built once from the CLI's arguments
(`sweep.commands.options`), read by the driver and carried, as its `task` part, unchanged to the
stage (`runners.settings`).

- `JobSettings`: what every sweep's driver is told (the store, the run id, Ray or local, retries);
- `ModelRun`: `hfsweep run` (the catalog and the models asked for, around a `ModelSettings`);
- `OpRun`: `hfsweep ops` (the OpInfos asked for, around an `OpSettings`).
What changes a row is marked where it is declared (`runners.settings.row`); `row_settings` of a
run adds the software versions that change rows. The resume check compares every one of them.
"""

from __future__ import annotations

import platform
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ground import settings as env
from ground.errors import UsageError
from ground.schema import LIBRARY_VERSION_FIELDS, run_dtypes
from runners.settings import (
    ModelSettings,
    OpSettings,
    dtype_names,
    file_hash,
    row,
    row_settings,
)

PLAN_BATCH = 16  # catalog entries per plan task (about 0.3 s of resolve + shrink on one core)


@dataclass(frozen=True)
class JobSettings:
    """What a sweep's driver is told, whatever it sweeps (the CLI's shared options)."""

    store: str = field(default_factory=env.default_store)
    run_id: str | None = None  # an existing run id resumes it
    executor: str = "ray"  # ray | local (`--local`: no Ray, tasks in children of the driver)
    address: str | None = None  # an existing Ray cluster
    num_cpus: int | None = None  # the embedded Ray's size (default: the machine's cores)
    retries: int = 2  # of a task the environment stopped, never of a model's own failure
    report: bool = True  # print the summary at the end
    flush_s: float = 2.0  # the writer's timer
    progress: bool | None = None  # None: on when stderr is a terminal
    command: str = ""  # the command line, for the run's row

    def __post_init__(self) -> None:
        if self.executor not in ("ray", "local"):
            raise UsageError(f"unknown executor {self.executor!r} (use ray or local)")
        if self.retries < 0:
            raise UsageError("--retries must be 0 or more")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise UsageError("--num-cpus must be at least 1")


def _catalog_columns(name: str, known: Mapping[str, Any]) -> dict[str, Any]:
    stream = known["catalog"]
    return {"catalog": stream.name, "catalog_hash": file_hash(stream.path)}


@dataclass(frozen=True)
class ModelRun:
    """Everything `hfsweep run` was asked to do."""

    job: JobSettings = JobSettings()
    task: ModelSettings = ModelSettings()
    catalog: str = field(default="bundled", metadata=row(encode=_catalog_columns))
    top: int | None = 50
    models: tuple[str, ...] | None = None  # explicit model ids from the catalog (overrides top)
    dedup: bool = True
    plan_batch: int = PLAN_BATCH  # catalog entries per plan task
    nightly: str | None = None  # the nightly series (`hfsweep nightly`), in the run's row
    reuse: str | None = None  # copy earlier runs' rows by task key: latest, a run id, all
    # every dtype the run sweeps each model at, in order (`--dtype fp32,bf16`); empty: the
    # task's one. `task` then holds the first; each model task runs with `at(dtype)`.
    dtypes: tuple[str, ...] = ()

    # software whose version changes what a model's row says
    VERSIONS: ClassVar[tuple[str, ...]] = (
        "torch_version",
        "transformers_version",
        "diffusers_version",
        "device_package_version",
        "project_version",
    )

    def __post_init__(self) -> None:
        if self.top is not None and self.top < 1:
            raise UsageError("--top must be at least 1")
        if self.models is not None:
            object.__setattr__(self, "models", tuple(self.models))
        names = dtype_names(self.dtypes) if self.dtypes else (self.task.dtype,)
        object.__setattr__(self, "dtypes", names)
        if self.task.dtype != names[0]:
            object.__setattr__(self, "task", replace(self.task, dtype=names[0]))

    def at(self, dtype: str) -> ModelSettings:
        """The model task's settings at one of the run's dtypes."""
        return self.task if dtype == self.task.dtype else replace(self.task, dtype=dtype)

    def row_settings(self, device: Any, catalog: Any) -> dict[str, Any]:
        """Every setting of this run that changes what a row says (stored in the run row; its
        `dtype` column names every dtype of the run, comma-separated)."""
        versions = software_versions(device)
        return {
            **row_settings(self, {"device": device, "catalog": catalog}),
            "dtype": ",".join(self.dtypes),
            **{k: versions.get(k) for k in self.VERSIONS},
        }


@dataclass(frozen=True)
class OpRun:
    """Everything `hfsweep ops` was asked to do."""

    job: JobSettings = JobSettings()
    task: OpSettings = OpSettings()
    ops: tuple[str, ...] | None = None  # OpInfo names; None: all of op_db
    group_size: int = 4  # OpInfos per task

    # software whose version changes what an op row says
    VERSIONS: ClassVar[tuple[str, ...]] = (
        "torch_version",
        "device_package_version",
        "project_version",
    )

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise UsageError("--group-size must be at least 1")
        if self.ops is not None:
            object.__setattr__(self, "ops", tuple(self.ops))

    def row_settings(self, device: Any) -> dict[str, Any]:
        versions = software_versions(device)
        return {
            **row_settings(self, {"device": device}),
            **{k: versions.get(k) for k in self.VERSIONS},
        }


def check_same_settings(previous: dict[str, Any], settings: dict[str, Any]) -> None:
    """A resume must be the same run: refuse one whose settings would change its rows."""
    differ = []
    for key, want in settings.items():
        have = previous.get(key)
        if have is None or want is None:  # a run row from before the column existed
            continue
        if key == "dtype" and set(run_dtypes(have)) == set(run_dtypes(want)):
            continue  # the same dtypes (a run row of one dtype reads as a set of one)
        if have != want:
            differ.append(f"{key}={have} (now {want})")
    if differ:
        raise UsageError(
            f"run {previous['run_id']} was started with other settings: {', '.join(differ)}",
            hint="resume with the same command and software, or start a new run without --run-id",
        )


def package_version(name: str) -> str | None:
    """The installed version of a distribution (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def software_versions(device: Any = None) -> dict[str, str | None]:
    """The versions of what a run ran on (its row records them)."""
    version = package_version
    versions = {
        # the runs table's library columns (`<package>_version`), declared by the schema
        **{f: version(f.removesuffix("_version")) for f in LIBRARY_VERSION_FIELDS},
        "ray_version": version("ray"),
        "expecttest_version": version("expecttest"),
        "project_version": version("hfsweep"),
        "git_sha": _git_sha(),
        "python_version": platform.python_version(),
        "hostname": socket.gethostname(),
    }
    if device is not None:
        device_versions = device.versions()
        versions["device_package_version"] = next(iter(device_versions.values()), None)
    return versions


def _git_sha() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
