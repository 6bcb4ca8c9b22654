"""Training as users train (`steps.py`), each stage on a fresh copy of the loaded weights: two
AdamW steps with PyTorch's default AdamW for the device, the same with `fused=True`, one step
under bf16 autocast, one LoRA step (peft's default target modules). Asked for by name
(`--stages training` or `all`): they add rows, an optional package (peft) and cost to every
model (bench/training_stages.py). Each builds on load, forward and backward, so a compile or
generate failure does not hide whether a model trains."""

from __future__ import annotations

from ground.schema import Stage
from runners.stages.declare import StageDecl, StageGroup

_STEPS = "runners.stages.training.steps"
_NEEDS = (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)

GROUP = StageGroup(
    name="training",
    help="training: each brings load,forward,backward",
    stages=(
        StageDecl(
            Stage.OPTIMIZER,
            f"{_STEPS}:OptimizerStage",
            needs=_NEEDS,
            copies_weights=True,
            columns=("step_op_calls",),
            help="2 steps, default AdamW",
        ),
        StageDecl(
            Stage.OPTIMIZER_FUSED,
            f"{_STEPS}:FusedOptimizerStage",
            needs=_NEEDS,
            copies_weights=True,
            columns=("step_op_calls",),
            help="2 steps, AdamW(fused=True)",
        ),
        StageDecl(
            Stage.AMP,
            f"{_STEPS}:AmpStage",
            needs=_NEEDS,
            copies_weights=True,
            help="1 step, bf16 autocast",
        ),
        StageDecl(
            Stage.LORA,
            f"{_STEPS}:LoraStage",
            needs=_NEEDS,
            copies_weights=True,
            help="1 step, peft LoRA",
        ),
    ),
    section="fine_tune",
)
