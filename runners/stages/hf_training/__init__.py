"""Training as Hugging Face users train (docs/stages.md), with the device found the way the
libraries find it: transformers' Trainer (three steps, saved and loaded back), the same with
`torch_compile=True`, TRL's SFTTrainer with peft's LoRA (`trainers.py`), and Accelerate's
`Accelerator` on a group of ranks (`--world-size`, `accelerate_ddp.py`); each against the same
trainer on the CPU. Asked for by name (`--stages hf_training` or `all`): they need the
hf-training extra (trl, datasets), and add cost to every model (bench/hf_training.py)."""

from __future__ import annotations

from ground.schema import Stage
from runners.stages.core import COMPILE_COLUMNS
from runners.stages.declare import StageDecl, StageGroup
from runners.stages.distributed import RANK_COLUMNS

_HERE = "runners.stages.hf_training"
_NEEDS = (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)
# What a trainer stage records: where the weights trained, the settings it ran with, the
# library's frame an error came from.
TRAINER_COLUMNS = ("trained_on", "hf_settings", "library_frame")

GROUP = StageGroup(
    name="hf_training",
    help="hf_training: Hugging Face's own trainers, accelerate_ddp on --world-size ranks; "
    "each brings load,forward,backward",
    stages=(
        StageDecl(
            Stage.TRAINER,
            f"{_HERE}.trainers:TrainerStage",
            needs=_NEEDS,
            copies_weights=True,
            columns=TRAINER_COLUMNS,
            help="transformers' Trainer, 3 steps, saved and loaded back",
        ),
        StageDecl(
            Stage.TRAINER_COMPILED,
            f"{_HERE}.trainers:CompiledTrainerStage",
            needs=_NEEDS,
            copies_weights=True,
            columns=(*TRAINER_COLUMNS, *COMPILE_COLUMNS),
            help="the same, torch_compile=True",
        ),
        StageDecl(
            Stage.SFT,
            f"{_HERE}.trainers:SftStage",
            needs=_NEEDS,
            copies_weights=True,
            columns=TRAINER_COLUMNS,
            help="TRL's SFTTrainer with peft's LoRA, 2 steps",
        ),
        StageDecl(
            Stage.ACCELERATE_DDP,
            f"{_HERE}.accelerate_ddp:AccelerateDdpStage",
            needs=_NEEDS,
            copies_weights=True,
            columns=(*TRAINER_COLUMNS, *RANK_COLUMNS),
            help="Accelerator on the ranks, 2 steps, gather",
            on_ranks=True,
            ends_group=True,
        ),
    ),
    section="hf_stack",
)
