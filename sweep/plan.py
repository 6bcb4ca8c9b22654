"""Plan a sweep: resolve and shrink each catalog entry, and group identical tiny models.

Every entry asked for ends up in exactly one of: a `Planned` with a decided outcome (a skip, or a
load failure of the shrinker), or a member of a `Task` (one per unique shrunk config), whose one
run answers for all its members.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from reports.errors import ConfigError, HubError
from reports.schema import Stage, Status
from runners.outcome import ModelOutcome, failed_before, skipped


@dataclass
class Planned:
    """One catalog entry after planning."""

    entry: CatalogEntry
    resolved: ResolvedConfig | None = None
    spec: TinySpec | None = None
    outcome: ModelOutcome | None = None  # decided without running (skip / shrink failure)


@dataclass
class Task:
    """One unique tiny model to run; `members` all share its result."""

    spec: TinySpec
    members: list[Planned] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.spec.hash

    @property
    def lead(self) -> Planned:
        return self.members[0]


def plan_entry(
    entry: CatalogEntry,
    stages: list[Stage],
    *,
    config_dir: Path | None = None,
    resolved: ResolvedConfig | None = None,
) -> Planned:
    """Resolve and shrink one entry; never raises for the model's own problems."""
    from model_configs.resolve import resolve_entry
    from model_configs.shrink import shrink

    planned = Planned(entry=entry, resolved=resolved)
    try:
        if planned.resolved is None:
            planned.resolved = resolve_entry(entry, config_dir=config_dir)
        arch = entry.architectures_hint[0] if entry.architectures_hint else None
        planned.spec = shrink(
            planned.resolved, architecture_hint=arch, pipeline_tag=entry.pipeline_tag
        )
    except ConfigError as exc:
        planned.outcome = skipped(stages, exc.reason, exc.message)
    except HubError:  # the Hub kept failing: an environment problem, never this model's result
        raise
    except Exception as exc:  # the shrinker failed: the model could not be loaded
        planned.outcome = failed_before(stages, Status.FAIL, type(exc).__name__, str(exc))
    return planned


def group_tasks(planned: Iterable[Planned]) -> list[Task]:
    """One task per unique shrunk config, in the order of each group's best-ranked member."""
    tasks: dict[str, Task] = {}
    for p in planned:
        if p.spec is None:
            continue
        tasks.setdefault(p.spec.hash, Task(spec=p.spec)).members.append(p)
    return list(tasks.values())


def plan_entries(
    entries: list[CatalogEntry],
    stages: list[Stage],
    *,
    config_dir: Path | None = None,
    on_planned: Callable[[Planned], None] | None = None,
) -> list[Planned]:
    from runners.run_model import quiet_libraries

    quiet_libraries()  # the libraries' per-config advice would drown the progress
    out = []
    for entry in entries:
        planned = plan_entry(entry, stages, config_dir=config_dir)
        out.append(planned)
        if on_planned is not None:
            on_planned(planned)
    return out


def changes_json(spec: TinySpec | None) -> str | None:
    return None if spec is None else json.dumps(spec.changes, sort_keys=True, default=str)
