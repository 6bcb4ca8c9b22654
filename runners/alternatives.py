"""A failing model run again with the documented switches of its own code, so that a next step
can say "passes with experts_implementation='batched_mm'" because it was run.

The switches are data (`runners/data/implementation_switches.json`, a reason each, read by
`runners/switches.py`). A switch of the model's own code: which ones a model takes, and its
default value, is its library adapter's answer (`model_configs.build.implementation_switches`:
transformers' `experts_implementation` and `attn_implementation`). A switch of
`TrainingArguments` (`torch_compile_backend`): a field of the arguments the hf_training stages
give the Trainer, taken where one of the stages it changes failed, its default the value that
stage's row recorded (`hf_settings`); the stage passes it to `TrainingArguments` on the device's
side (`runners.switches.trainer_arguments`), the model's code is left as it is. Which failures
make a switch worth a run is the next-step table's (`ground/next_steps.py`, its `try`): with
`--alternatives auto` (the default) a model whose first failure is of a class naming the switch,
with `all` any model that fails after loading, with `none` never; a failure no switch can change
(a collective the device's process group refuses: the class says `switches_change_nothing`) is
never run again. Each value is its own run, in its own process with the task's limits, of every
stage the task asked for; a switch's later values are not tried once one passes.

A model that passes, is skipped, or fails to load costs nothing more; the default run's rows are
unchanged (the headline and the funnel count those), each alternative's are its own
(`ModelOutcome.alternatives`, the store's `alternatives` table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ground.next_steps import classify, deciding_row
from ground.schema import Stage, Status
from model_configs.spec import TinySpec
from runners.outcome import AlternativeRun, ModelOutcome
from runners.settings import ModelSettings
from runners.switches import TRAINING_ARGUMENTS, Switch, switches

# a failure another implementation may change: not a timeout, a crash or an oom (each costs a
# whole limit again, and says nothing of which code ran), and not a failure to load
_RETRIED = {Status.FAIL.value, Status.FAIL_ACCURACY.value}


def _recorded(rows: Sequence[dict[str, Any]], switch: Switch) -> str | None:
    """What the failing stage's row says the trainer used for `switch` (its `hf_settings`)."""
    for row in rows:
        for entry in (row.get("hf_settings") or "").split("; "):
            key, _, value = entry.partition("=")
            if key == switch.name and row.get("stage") in switch.stages:
                return value
    return None


def worth_trying(rows: Sequence[dict[str, Any]], mode: str) -> list[str]:
    """The switches worth a run for a model whose default run gave `rows` (`mode`: auto, all,
    none), in the order tried."""
    if mode == "none":
        return []
    failed = next((r for r in rows if r.get("status") in _RETRIED), None)
    if failed is None or failed.get("stage") == Stage.LOAD.value:
        return []
    names = [s.name for s in switches()]
    found = classify(deciding_row(rows))
    if found.switches_change_nothing:  # a collective: no switch of the model's code changes it
        return []
    if mode == "all":
        return names
    wanted = set(found.try_switches)
    return [n for n in names if n in wanted]


def candidates(spec: TinySpec, rows: Sequence[dict[str, Any]], mode: str) -> list[str]:
    """`switch=value` runs to try, in order: the switches worth trying that the model's class
    takes, each with its values other than the class's default, and the TrainingArguments
    switches of a failed stage, each with its values other than the one the stage used."""
    names = worth_trying(rows, mode)
    if not names:
        return []
    from model_configs import build

    supported = build.implementation_switches(spec)
    failed = {r.get("stage") for r in rows if r.get("status") in _RETRIED}
    out = []
    for switch in switches():
        if switch.name not in names:
            continue
        if switch.of == TRAINING_ARGUMENTS:  # taken where a stage it changes failed
            if failed & set(switch.stages):
                default = _recorded(rows, switch)
                out += [f"{switch.name}={v}" for v in switch.values if v != default]
        elif switch.name in supported:
            out += [f"{switch.name}={v}" for v in switch.values if v != supported[switch.name]]
    return out


Runner = Callable[[TinySpec, ModelSettings], ModelOutcome]


def try_alternatives(
    spec: TinySpec,
    settings: ModelSettings,
    outcome: ModelOutcome,
    *,
    run: Runner | None = None,
    on_try: Callable[[str], None] | None = None,
) -> list[AlternativeRun]:
    """Run `spec` again with each candidate switch after its default run gave `outcome`
    (`run`: how one run is made, default `runners.isolation.run_isolated`; `on_try` sees each
    `switch=value` before it runs). None when the settings already name an implementation."""
    if settings.implementation is not None:
        return []
    tried = candidates(spec, [s.row() for s in outcome.stages], settings.alternatives)
    if not tried:
        return []
    if run is None:
        from runners.isolation import run_isolated

        run = run_isolated
    passed: set[str] = set()
    runs: list[AlternativeRun] = []
    for implementation in tried:
        switch = implementation.partition("=")[0]
        if switch in passed:
            continue
        if on_try is not None:
            on_try(implementation)
        other = run(spec, replace(settings, implementation=implementation))
        runs.append(AlternativeRun(implementation, other.stages, other.timings.get("child_s")))
        if runs[-1].passed:
            passed.add(switch)
    return runs
