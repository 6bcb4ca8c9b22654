"""The shape stages (`compiled.py`, docs/stages-shapes.md): the compiled forward at a second
sequence length and batch size (graphs, recompiles and their reasons, the device's compile
rule), and greedy generation with a static KV cache and the compiled forward. The funnel
counts them."""

from __future__ import annotations

from ground.schema import Stage
from runners.stages.core import COMPILE_COLUMNS
from runners.stages.declare import StageDecl, StageGroup

_COMPILED = "runners.stages.shapes.compiled"

GROUP = StageGroup(
    name="shapes",
    help="shapes: each brings the stages it builds on",
    stages=(
        StageDecl(
            Stage.SHAPES,
            f"{_COMPILED}:ShapesStage",
            # shapes recompiles what compile compiled
            needs=(Stage.LOAD, Stage.FORWARD, Stage.COMPILE),
            columns=(*COMPILE_COLUMNS, "recompile_reasons", "shape_verdict", "failing_op"),
            help="the compiled forward at new shapes",
            compiles=True,
        ),
        StageDecl(
            Stage.GENERATE_COMPILED,
            f"{_COMPILED}:GenerateCompiledStage",
            # generate_compiled compares with generate's tokens
            needs=(Stage.LOAD, Stage.FORWARD, Stage.GENERATE),
            columns=(*COMPILE_COLUMNS, "recompile_reasons"),
            help="greedy tokens with a static KV cache, compiled",
            compiles=True,
        ),
    ),
    section="funnel",
)
