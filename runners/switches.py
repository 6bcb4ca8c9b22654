"""The switches a failing model is run again with (`runners/data/implementation_switches.json`,
a reason each), read once: those of the model's own code, and those of the `TrainingArguments`
the hf_training stages give transformers' Trainer. A leaf module: the stages that apply a
switch and `runners/alternatives.py`, which picks them, both read it here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SWITCHES_FILE = Path(__file__).resolve().parent / "data" / "implementation_switches.json"


# a switch of the arguments the hf_training stages give transformers' Trainer
TRAINING_ARGUMENTS = "TrainingArguments"


@dataclass(frozen=True)
class Switch:
    name: str
    values: tuple[str, ...]
    reason: str
    of: str = "model"  # "model": the model's own code; TRAINING_ARGUMENTS: the Trainer's
    stages: tuple[str, ...] = ()  # a TrainingArguments switch: the stages it changes


@cache
def switches() -> tuple[Switch, ...]:
    """The switches, in the order tried."""
    data = json.loads(SWITCHES_FILE.read_text(encoding="utf-8"))
    return tuple(
        Switch(
            s["switch"],
            tuple(s["values"]),
            s["reason"],
            of=s.get("of", "model"),
            stages=tuple(s.get("stages", ())),
        )
        for s in data["switches"]
    )


def training_switch(implementation: str | None) -> Switch | None:
    """The TrainingArguments switch `implementation` (`SWITCH=VALUE`) names, or None (none
    given, or a switch of the model's own code)."""
    name = (implementation or "").partition("=")[0]
    return next((s for s in switches() if s.name == name and s.of == TRAINING_ARGUMENTS), None)


def trainer_arguments(implementation: str | None) -> dict[str, Any]:
    """The `TrainingArguments` fields a run's switch sets (`{}` where it sets none)."""
    if training_switch(implementation) is None:
        return {}
    assert implementation is not None
    name, _, value = implementation.partition("=")
    return {name: value}
