"""The five stages every run does unless `--stages` says otherwise: load, forward, backward,
compile, generate. Each builds on every stage before it; "passed every stage" means these."""

from __future__ import annotations

from ground.schema import Stage
from runners.stages.declare import StageDecl, StageGroup

_HERE = "runners.stages.core"
# What the compile stage records: Dynamo's graphs, breaks and recompiles, the device compiler's
# partitions and the evidence its verdicts rest on, the first (compiling) and a steady step.
COMPILE_COLUMNS = (
    "graph_count",
    "graph_break_count",
    "recompile_count",
    "partition_count",
    "compile_evidence",
    "unverified_ops",
    "compile_s",
    "step_s",
)

GROUP = StageGroup(
    name="default",
    help="the default",
    stages=(
        StageDecl(Stage.LOAD, f"{_HERE}.load:LoadStage", help="build, save and load back"),
        StageDecl(
            Stage.FORWARD,
            f"{_HERE}.forward:ForwardStage",
            needs=(Stage.LOAD,),
            help="a forward pass against the CPU",
        ),
        StageDecl(
            Stage.BACKWARD,
            f"{_HERE}.backward:BackwardStage",
            needs=(Stage.LOAD, Stage.FORWARD),
            help="a loss, backward, gradients against the CPU",
        ),
        StageDecl(
            Stage.COMPILE,
            f"{_HERE}.compile:CompileStage",
            needs=(Stage.LOAD, Stage.FORWARD, Stage.BACKWARD),
            columns=COMPILE_COLUMNS,
            compiles=True,
            help="a training step through torch.compile",
        ),
        StageDecl(
            Stage.GENERATE,
            f"{_HERE}.generate:GenerateStage",
            needs=(Stage.LOAD, Stage.FORWARD, Stage.BACKWARD, Stage.COMPILE),
            help="a few greedy tokens (generative models)",
        ),
    ),
    section="funnel",
    brings_needs=False,
    in_default=True,
)
