"""The stages: one folder per stage group, and their registry.

Each group is a package beside this module (`core/`, `training/`, `shapes/`, `distributed/`,
`hf_training/`): its declaration in its `__init__.py` (a `StageGroup` of `declare.py`: its
stages with their runners, needs, extra columns and help lines, its `--stages` name and help,
the report section that counts it) and its runners in modules of their own. `GROUPS` is the
only place that names them: a group name maps to a lazy `"module:attr"` target of its
declaration, as `model_configs/libraries/` maps a library to its adapter. Declarations import
only `ground`, so reading this registry imports no torch: the CLI (`--stages`, its help), the
run settings and the reading side (the report's sections) ask it; a stage's runner (torch, the
model libraries) is imported only when a stage runs (`engine.stage_runner`). The engine
that runs them is `engine.py`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ground.schema import Stage

if TYPE_CHECKING:
    from runners.stages.declare import StageDecl, StageGroup

# Group name (its `--stages` name) -> its declaration, in run order: a run does its stages in
# this order, and a group's stages in the order it declares them.
GROUPS: dict[str, str] = {
    "default": "runners.stages.core:GROUP",
    "training": "runners.stages.training:GROUP",
    "shapes": "runners.stages.shapes:GROUP",
    "distributed": "runners.stages.distributed:GROUP",
    "hf_training": "runners.stages.hf_training:GROUP",
}
# `--stages all`: every stage of every group.
ALL = "all"


def load_target(target: str) -> object:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@functools.cache
def stage_groups() -> tuple[StageGroup, ...]:
    """Every group's declaration, in `GROUPS` order."""
    found = []
    for name, target in GROUPS.items():
        group = load_target(target)
        if getattr(group, "name", None) != name:
            raise ValueError(
                f"{target} declares group {getattr(group, 'name', None)!r}, not {name!r}"
            )
        found.append(group)
    return tuple(found)  # type: ignore[arg-type]


@functools.cache
def declarations() -> dict[Stage, StageDecl]:
    """Every stage's declaration, in run order."""
    found: dict[Stage, StageDecl] = {}
    for group in stage_groups():
        for decl in group.stages:
            if decl.name in found:
                raise ValueError(f"stage {decl.name.value!r} is declared twice")
            found[decl.name] = decl
    return found


def stage_order() -> tuple[Stage, ...]:
    """Every registered stage, in run order."""
    return tuple(declarations())


def group_stages(name: str) -> tuple[Stage, ...]:
    """The stages of the group `name` (`all`: every stage)."""
    if name == ALL:
        return stage_order()
    for group in stage_groups():
        if group.name == name:
            return tuple(d.name for d in group.stages)
    raise KeyError(name)


def group_of(stage: Stage) -> StageGroup:
    """The group that declares `stage`."""
    return next(g for g in stage_groups() if any(d.name == stage for d in g.stages))


def default_stages() -> tuple[Stage, ...]:
    """What a run does without `--stages`: the stages of the groups declared `in_default`."""
    return tuple(d.name for g in stage_groups() if g.in_default for d in g.stages)


@functools.cache
def stage_needs() -> dict[Stage, tuple[Stage, ...]]:
    """The stages each stage builds on (among those a run asks for): one of them not passing
    makes it `not_run`."""
    return {stage: decl.needs for stage, decl in declarations().items()}


def rank_stages() -> tuple[Stage, ...]:
    """The stages that run on a group of rank processes (`runners/distributed/`), one per rank."""
    return tuple(s for s, d in declarations().items() if d.on_ranks)


def compiles(stages: Iterable[Stage]) -> bool:
    """Whether any of `stages` calls `torch.compile` (what a parent warms its children's
    compile stack for)."""
    return any(declarations()[s].compiles for s in stages)


def copies_weights(stages: Iterable[Stage]) -> bool:
    """Whether any of `stages` trains a copy of the loaded weights (the load stage keeps them)."""
    return any(declarations()[s].copies_weights for s in stages)


@functools.cache
def extra_columns() -> frozenset[str]:
    """The row columns a stage may fill from `ctx.extra`: every stage's declared ones, and the
    engine's own (`check_close`'s `max_abs_error`)."""
    from runners.stages.declare import ENGINE_COLUMNS

    return ENGINE_COLUMNS | {c for d in declarations().values() for c in d.columns}


def section_stages(section: str) -> tuple[Stage, ...]:
    """The stages of the groups the report section `section` counts."""
    return tuple(d.name for g in stage_groups() if g.section == section for d in g.stages)


def labels(stages: Iterable[Stage | str]) -> dict[str, str]:
    """Each stage's label in a report (`name: help`), by its name."""
    found = declarations()
    return {Stage(s).value: f"{Stage(s).value}: {found[Stage(s)].help}" for s in stages}


def stages_help() -> str:
    """The `--stages` help: each group's stages and what the group is, then the group names."""
    parts = [f"{','.join(d.name.value for d in g.stages)} ({g.help})" for g in stage_groups()]
    names = [g.name for g in stage_groups()] + [ALL]
    return f"comma-separated stages: {', '.join(parts)}; or the groups {', '.join(names)}"


def runner_modules(stages: Iterable[Stage]) -> tuple[str, ...]:
    """The modules that hold the runners of `stages` (what a forking parent imports once)."""
    return tuple(dict.fromkeys(declarations()[s].runner.partition(":")[0] for s in stages))


def forget() -> None:
    """Read `GROUPS` again on the next question (after a test changed it)."""
    for cached in (stage_groups, declarations, stage_needs, extra_columns):
        cached.cache_clear()
