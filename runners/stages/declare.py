"""What a stage group declares about itself, in its own folder: the stages (each with its
name, runner, needs, extra columns and help line), the group's `--stages` name and help, and
the report section that counts it.

Declarations import nothing but `ground`: the registry (`runners/stages/__init__.py`) reads
them without torch, so the CLI, the run settings and the reading side can ask it which stages
there are, what each needs and how the report counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground.schema import Stage


@dataclass(frozen=True)
class StageDecl:
    """One stage: its name (the `Stage` value its rows carry), its runner as a lazy
    `"module:Class"` target (a `StageRunner` of `runners/stages/engine.py`), the stages it
    builds on (one of them not passing makes it `not_run`), the extra row columns its runner
    writes to `ctx.extra`, its help line (what it does, in a few words: the report's label
    for it is `name: help`), and what the engine must know of it: whether it
    calls `torch.compile` (`compiles`: a parent warms its children's compile stack for it),
    trains a copy of the loaded weights (`copies_weights`: the load stage keeps them
    untouched), or runs on a group of rank processes (`on_ranks`: `runners/distributed/`; `ends_group`:
    no later stage may reuse that group)."""

    name: Stage
    runner: str
    needs: tuple[Stage, ...] = ()
    columns: tuple[str, ...] = ()
    help: str = ""
    compiles: bool = False
    copies_weights: bool = False
    on_ranks: bool = False
    # a rank stage that leaves library state in its ranks (the device presented to
    # transformers and accelerate, accelerate's process-wide state): its group is closed after it
    ends_group: bool = False


@dataclass(frozen=True)
class StageGroup:
    """A group of stages, one folder: its `--stages` name (`default`, `training`, ...), what
    the group is in the `--stages` help, its stages in run order, whether naming one of its
    stages brings the stages it needs (`brings_needs`), and the report section that counts
    it (`section`: the key of a section of the reading side, `reports/render/sections.py`; a
    group whose key names none gets a section of its own from `stage_counts`, titled
    `section_title`)."""

    name: str
    help: str
    stages: tuple[StageDecl, ...]
    section: str
    section_title: str = ""
    brings_needs: bool = True
    in_default: bool = False  # the stages a run does without `--stages`


# The columns the engine itself fills for any stage (`check_close`: the largest difference from
# the CPU reference).
ENGINE_COLUMNS = frozenset({"max_abs_error"})
