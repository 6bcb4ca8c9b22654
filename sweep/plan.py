"""Plan a sweep: resolve and shrink each catalog entry, and group identical tiny models.

Every entry asked for ends up in exactly one of: a `Planned` with a decided outcome (a skip, or a
load failure of the shrinker), or a member of a `Task` (one per unique shrunk config), whose one
run answers for all its members.

Planning runs where the models run: `plan_batch` is the body of a plan task on a worker (or in
the driver with `--local`); it returns slim `Planned`s (no full-size config) so that what crosses
back to the driver is small. Grouping happens in the driver, as plans arrive (`sweep.ledger`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ground.errors import ConfigError, is_environment_error, safe_text
from ground.schema import ConfigSource, Stage, Status
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from runners.outcome import ModelOutcome, failed_before, skipped
from runners.settings import ModelSettings

if TYPE_CHECKING:
    from sizing.measure import ModelSize


@dataclass
class Planned:
    """One catalog entry after planning.

    `config_source` / `config_hash` / `library` / `model_type` describe the resolved full-size
    config; `resolved` holds that config itself only where it is needed (`hfsweep check`) and is
    dropped (`slim`) before a plan crosses back to the driver.
    """

    entry: CatalogEntry
    resolved: ResolvedConfig | None = None
    spec: TinySpec | None = None
    outcome: ModelOutcome | None = None  # decided without running (skip / shrink failure)
    config_source: str = ConfigSource.NONE.value
    config_hash: str | None = None
    library: str | None = None
    model_type: str | None = None
    quantization: str | None = None  # the method a quantized checkpoint needs (its rows say it)
    plan_key: str | None = None  # the key of what it was planned from (`sweep.plans`)
    size: ModelSize | None = None  # the model at full size (`sizing.measure`)

    def slim(self) -> Planned:
        return replace(self, resolved=None)

    @property
    def shrunk_hash(self) -> str | None:
        return self.spec.hash if self.spec is not None else None


@dataclass
class Task:
    """One unique tiny model to run; `members` all share its result (the first is the lead)."""

    spec: TinySpec
    members: list[Planned] = field(default_factory=list)
    key: str = ""  # the dedup key: the shrunk config's hash (or, without dedup, the model id)
    dtype: str | None = None  # the dtype it runs at (a run of several: one task per dtype)
    settings: ModelSettings = field(kw_only=True)  # what its body runs with (at `dtype`)

    def __post_init__(self) -> None:
        self.key = self.key or self.spec.hash

    @property
    def lead(self) -> Planned:
        return self.members[0]

    @property
    def payload(self) -> TinySpec:
        """What the task's body runs (`sweep.executors.protocol.Work`)."""
        return self.spec

    def names(self) -> list[str]:
        return [m.entry.model_id for m in self.members]

    def fault_keys(self) -> tuple[str | None, ...]:
        from runners import faults

        return faults.spec_keys(self.spec)


def plan_entry(
    entry: CatalogEntry,
    stages: list[Stage],
    *,
    config_dir: Path | None = None,
    resolved: ResolvedConfig | None = None,
) -> Planned:
    """Resolve and shrink one entry; never raises for the model's own problems."""
    from model_configs import guards
    from model_configs.quantization import method_of_entry
    from model_configs.resolve import resolve_entry
    from model_configs.shrink import shrink
    from runners import faults
    from sizing.measure import size_model

    planned = Planned(entry=entry, resolved=resolved)
    try:
        faults.inject("plan", entry.model_id, entry.model_type_hint)
        if planned.resolved is None:
            planned.resolved = resolve_entry(entry, config_dir=config_dir)
        for config in (planned.resolved.config, *planned.resolved.components.values()):
            guards.check_shape(config, model_id=entry.model_id)  # whatever read it
        _describe(planned, planned.resolved)
        arch = entry.architectures_hint[0] if entry.architectures_hint else None
        planned.spec = shrink(
            planned.resolved, architecture_hint=arch, pipeline_tag=entry.pipeline_tag
        )
        planned.size = size_model(planned.resolved, planned.spec)  # never fails the model
    except ConfigError as exc:
        planned.outcome = skipped(stages, exc.reason, exc.message)
    except Exception as exc:  # the shrinker failed: the model could not be loaded
        if is_environment_error(exc):  # the Hub kept failing, a core package is missing, the
            raise  # disk is full...: the machine's problem, never this model's result
        planned.outcome = failed_before(stages, Status.FAIL, type(exc).__name__, safe_text(exc))
    planned.quantization = method_of_entry(entry, planned.resolved)
    return planned


def _describe(planned: Planned, resolved: ResolvedConfig) -> None:
    planned.config_source = resolved.source
    planned.config_hash = resolved.hash
    planned.library = resolved.library
    planned.model_type = resolved.model_type


def plan_batch(
    entries: Sequence[CatalogEntry], stages: list[Stage] | list[str], config_dir: str | None
) -> list[Planned]:
    """The body of one plan task: plan each entry, in order, and keep what the driver needs."""
    from runners.run_model import quiet_libraries

    quiet_libraries()  # the libraries' per-config advice would drown the progress
    order = [Stage(s) for s in stages]
    folder = Path(config_dir) if config_dir else None
    return [plan_entry(e, order, config_dir=folder).slim() for e in entries]


def group_tasks(planned: Iterable[Planned], settings: ModelSettings) -> list[Task]:
    """One task per unique shrunk config, in the order of each group's best-ranked member, each
    run with `settings`."""
    tasks: dict[str, Task] = {}
    for p in planned:
        if p.spec is None:
            continue
        tasks.setdefault(p.spec.hash, Task(spec=p.spec, settings=settings)).members.append(p)
    return list(tasks.values())


def plan_entries(
    entries: list[CatalogEntry],
    stages: list[Stage],
    *,
    config_dir: Path | None = None,
    on_planned: Callable[[Planned], None] | None = None,
) -> list[Planned]:
    """Plan entries one by one in this process (benches, tests, `hfsweep check`)."""
    from runners.run_model import quiet_libraries

    quiet_libraries()
    out = []
    for entry in entries:
        planned = plan_entry(entry, stages, config_dir=config_dir)
        out.append(planned)
        if on_planned is not None:
            on_planned(planned)
    return out


def changes_json(spec: TinySpec | None) -> str | None:
    return None if spec is None else json.dumps(spec.changes, sort_keys=True, default=str)


def config_json(spec: TinySpec | None) -> str | None:
    return None if spec is None else json.dumps(spec.config, sort_keys=True, default=str)
