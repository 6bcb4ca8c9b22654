"""The next step for a model's result: one table of failure classes, each with one line to act on.

The table is data (`ground/data/next_steps.json`, a reason per entry), with each device's own
classes merged in: a device declares them in its folder (`runners/devices/<name>/data/
next_steps.json`, each placed `before` a class of the core table), read here by path, never by
importing the device (the reading side stands on the ground alone). Each class matches a
model's deciding row (its first failing stage, else its skip, else its pass) on the columns it
lists, and says what to do in one line, with a command where one takes the step. `hfsweep
check`, `hfsweep lookup`, the model page and the report all read it here, so they say the same.

A step is proven, not guessed, where the sweep ran the model again with one of its own
implementation switches (`experts_implementation='batched_mm'`, `attn_implementation='eager'`:
the `alternatives` table) and every stage passed: the step then says so and gives the command
that reproduces it. A precondition that the tiny input meets or misses only by its size says
what the full-size model meets (`at_full_size`).

Pure functions over row dicts (the results schema's columns): no torch, nothing run.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ground.schema import EXPERTS_PER_TOKEN_KEYS, FAILED_STATUSES, SkipReason, Status

TABLE = Path(__file__).resolve().parent / "data" / "next_steps.json"
# each device's own classes: runners/devices/<name>/data/next_steps.json, by path
DEVICE_TABLES = Path(__file__).resolve().parents[1] / "runners" / "devices"
_FAILED = {s.value for s in FAILED_STATUSES}
_NA = SkipReason.NOT_APPLICABLE.value
# skips that say there is nothing to run there (a tp stage without a plan), not a stop
NOT_A_STOP = frozenset({_NA, SkipReason.NO_TP_PLAN.value})
# the command a missing_package skip's message names: the locked route (scripts/install.sh), or
# a pip install (`pip install 'hfsweep[EXTRA]'` in rows written before the locked route)
_INSTALL = re.compile(r"bash scripts/install\.sh \S+|pip install (?:'[^']+'|\"[^\"]+\"|\S+)")
_EXTRA = re.compile(r"""pip install ['"]?hfsweep\[([\w,-]+)\]['"]?$""")


@dataclass(frozen=True)
class FailureClass:
    """One entry of the table."""

    failure: str
    title: str
    match: Mapping[str, Any]
    step: str
    reason: str
    command: str | None = None
    try_switches: tuple[str, ...] = ()
    # the full-size note (`note`: its kind) and the patterns that read the error text it needs
    at_full_size: Mapping[str, str] | None = None
    # no implementation switch can change the failure (a collective): never run with one
    switches_change_nothing: bool = False

    def matches(self, row: Mapping[str, Any]) -> bool:
        for key, want in self.match.items():
            if key == "message":
                if not re.search(want, row.get("error_message") or ""):
                    return False
            elif key == "failing_op":
                if not re.search(want, row.get("failing_op") or ""):
                    return False
            elif key == "unverified":
                if bool(row.get("unverified_ops") or row.get("unverified")) != want:
                    return False
            elif key == "fallbacks":
                if bool(row.get("fallback_ops") or row.get("fallback_op_count")) != want:
                    return False
            elif key == "evidence":
                if row.get("compile_evidence") not in want:
                    return False
            elif key == "has":
                if not all(row.get(column) for column in want):
                    return False
            elif row.get(key) not in want:
                return False
        return True


def _failure_class(c: Mapping[str, Any]) -> FailureClass:
    return FailureClass(
        failure=c["failure"],
        title=c["title"],
        match=c["match"],
        step=c["step"],
        reason=c["reason"],
        command=c.get("command"),
        try_switches=tuple(c.get("try", ())),
        at_full_size=c.get("at_full_size"),
        switches_change_nothing=bool(c.get("switches_change_nothing")),
    )


def device_tables() -> list[Path]:
    """Each device's file of failure classes, in the order of the devices' folder names."""
    return sorted(DEVICE_TABLES.glob("*/data/next_steps.json"))


@cache
def classes() -> tuple[FailureClass, ...]:
    """The table, in matching order: the core classes, each device's placed before the core
    class its `before` names (devices in the order of their folders' names)."""
    core = json.loads(TABLE.read_text(encoding="utf-8"))["classes"]
    names = {c["failure"] for c in core}
    before: dict[str, list[Mapping[str, Any]]] = {}
    for path in device_tables():
        for c in json.loads(path.read_text(encoding="utf-8"))["classes"]:
            if c.get("before") not in names:
                raise ValueError(f"{path}: {c['failure']} is before {c.get('before')!r}, no class")
            before.setdefault(c["before"], []).append(c)
    merged = [d for c in core for d in (*before.get(c["failure"], ()), c)]
    return tuple(_failure_class(c) for c in merged)


def classify(row: Mapping[str, Any]) -> FailureClass:
    """The first class of the table that `row` (a deciding row: see `deciding_row`) matches."""
    for c in classes():
        if c.matches(row):
            return c
    return next(c for c in classes() if c.failure == "skipped")  # a status the table lacks


def deciding_row(
    rows: Sequence[Mapping[str, Any]], fallbacks: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The row a model's result turns on: its first failing stage, else its first skip (a
    model not attempted), else a pass carrying the ops that fell back and those no evidence
    decides (`fallback_ops`, `unverified_ops`)."""
    failed = next((r for r in rows if r.get("status") in _FAILED), None)
    if failed is not None:
        return dict(failed)
    skipped = next(
        (
            r
            for r in rows
            if r.get("status") == Status.SKIP.value and r.get("reason") not in NOT_A_STOP
        ),
        None,
    )
    if skipped is not None:
        return dict(skipped)
    ops = sorted({f["op"] for f in fallbacks if f.get("op")})
    unverified = sorted({op for r in rows for op in (r.get("unverified_ops") or [])})
    first = rows[0] if rows else {}
    return {
        "status": Status.PASS.value,
        "stage": None,
        "dtype": first.get("dtype"),
        "fallback_ops": ops,  # the ops by name, where the fallbacks table was read
        "fallback_op_count": max((r.get("fallback_op_count") or 0 for r in rows), default=0),
        "unverified_ops": unverified,
    }


def summary_row(s: Mapping[str, Any]) -> dict[str, Any]:
    """A model's deciding row from its summary (the `model_runs` columns: its first failure,
    its skip, or its pass with the fallbacks and unverified ops counted), for `classify`."""
    if s.get("failed_status"):
        return {
            "status": s["failed_status"],
            "stage": s.get("failed_stage"),
            "error_type": s.get("error_type"),
            "error_message": s.get("error_message"),
            "failing_op": s.get("failing_op"),
            "compile_evidence": s.get("failed_evidence"),
            "dtype": s.get("dtype"),
        }
    if s.get("skip_reason"):
        return {
            "status": Status.SKIP.value,
            "reason": s["skip_reason"],
            "error_message": s.get("skip_message"),
            "dtype": s.get("dtype"),
        }
    return {  # a summary counts the ops, without their names
        "status": Status.PASS.value,
        "dtype": s.get("dtype"),
        "unverified": bool(s.get("unverified")),
        "fallback_op_count": int(s.get("fallback_ops") or 0),
    }


@dataclass(frozen=True)
class Alternative:
    """One implementation switch the model was run again with, and how far it got."""

    implementation: str  # "experts_implementation=batched_mm"
    passed: bool
    failed_stage: str | None = None
    failure: str | None = None  # the failing op or error, in a few words
    fallback_ops: int = 0  # distinct ops that fell back to the CPU (the most of any stage)

    @property
    def label(self) -> str:
        """`experts_implementation='batched_mm'`, as transformers' code spells it."""
        key, _, value = self.implementation.partition("=")
        return f"{key}={value!r}"

    def describe(self) -> str:
        if self.passed:
            fell = (
                f", {self.fallback_ops} op{'s' if self.fallback_ops != 1 else ''} falling back "
                "to the CPU"
                if self.fallback_ops
                else ""
            )
            return f"{self.label} passes every stage{fell}"
        where = f" at {self.failed_stage}" if self.failed_stage else ""
        return f"{self.label} fails{where}" + (f" ({self.failure})" if self.failure else "")


def alternatives_of(rows: Iterable[Mapping[str, Any]]) -> list[Alternative]:
    """The `alternatives` table's rows of one model and dtype, one Alternative per switch
    value, in the order they were tried."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["implementation"], []).append(r)
    out = []
    for implementation, stage_rows in by.items():
        failed = next((r for r in stage_rows if r.get("status") in _FAILED), None)
        passed = failed is None and all(
            r.get("status") == Status.PASS.value
            or (r.get("status") == Status.SKIP.value and r.get("reason") in NOT_A_STOP)
            for r in stage_rows
        )
        out.append(
            Alternative(
                implementation=implementation,
                passed=passed,
                failed_stage=failed.get("stage") if failed else None,
                failure=_few_words(failed) if failed else None,
                fallback_ops=max((r.get("fallback_op_count") or 0 for r in stage_rows), default=0),
            )
        )
    return out


def _few_words(row: Mapping[str, Any]) -> str | None:
    if row.get("failing_op"):
        return str(row["failing_op"])
    message = (row.get("error_message") or "").strip().splitlines()
    kind = row.get("error_type")
    text = message[0] if message else ""
    if len(text) > 60:
        text = text[:57].rsplit(" ", 1)[0] + "..."
    return f"{kind}: {text}" if kind and text else (kind or text or None)


@dataclass(frozen=True)
class NextStep:
    """What to do next about one model, in one line (`text`), with the command that takes the
    step (`command`, where one does) and why (`why`, the table's reason)."""

    failure: str  # the failure class (the table's key)
    title: str
    text: str
    command: str | None
    why: str
    proven: str | None = None  # the implementation switch that passed when it was run
    tried: tuple[str, ...] = ()  # alternatives run that did not pass, each described
    at_full_size: str | None = None  # what the full-size model meets, where size decides

    def to_dict(self) -> dict[str, Any]:
        return {
            "failure": self.failure,
            "title": self.title,
            "text": self.text,
            "command": self.command,
            "why": self.why,
            "proven": self.proven,
            "tried": list(self.tried),
            "at_full_size": self.at_full_size,
        }

    def lines(self) -> list[str]:
        """The step as `check` and `lookup` print it: the step, then the command, what was
        tried and the full-size note, each on a line of its own."""
        out = [self.text]
        if self.command:
            out.append(f"run: {self.command}")
        if self.tried:
            out.append("tried: " + "; ".join(self.tried))
        if self.at_full_size:
            out.append(f"at full size: {self.at_full_size}")
        return out


def check_command(model: str, device: str, *extra: str) -> str:
    """`hfsweep check MODEL --device DEVICE ...`, quoted for a shell."""
    return " ".join(
        ["hfsweep", "check", shlex.quote(model), "--device", shlex.quote(device), *extra]
    )


def next_step(
    rows: Sequence[Mapping[str, Any]],
    *,
    model: str,
    device: str,
    fallbacks: Iterable[Mapping[str, Any]] = (),
    check: str | None = None,
    timeout_s: float | None = None,
    memory_limit_bytes: int | None = None,
    config: Mapping[str, Any] | None = None,
    changes: Mapping[str, Any] | None = None,
    alternatives: Sequence[Alternative] = (),
    store: str | None = None,
) -> NextStep:
    """The next step for one model's stage rows (at one dtype) on `device`. `check`: the
    command that reruns it (default `hfsweep check MODEL --device DEVICE`); `config` and
    `changes`: its shrunk config and what the shrink changed, for the full-size note;
    `alternatives`: the implementation switches it was run again with; `store`: the store its
    rows came from (None: none, as for `check`; a command that needs it is then left out)."""
    row = deciding_row(rows, fallbacks)
    return step_for_row(
        row,
        model=model,
        device=device,
        check=check,
        timeout_s=timeout_s,
        memory_limit_bytes=memory_limit_bytes,
        config=config,
        changes=changes,
        alternatives=alternatives,
        store=store,
    )


def step_for_row(
    row: Mapping[str, Any],
    *,
    model: str,
    device: str,
    check: str | None = None,
    timeout_s: float | None = None,
    memory_limit_bytes: int | None = None,
    config: Mapping[str, Any] | None = None,
    changes: Mapping[str, Any] | None = None,
    alternatives: Sequence[Alternative] = (),
    store: str | None = None,
) -> NextStep:
    """`next_step` of a model's deciding row (`deciding_row`, or `summary_row` of its summary)."""
    found = classify(row)
    base = check or check_command(model, device)
    values = _values(row, model=model, device=device, check=base, timeout_s=timeout_s)
    if store:
        values["store_q"] = shlex.quote(store)
    values["memory_of"] = (
        f" (its budget: {memory_limit_bytes / 2**30:g} GiB)" if memory_limit_bytes else ""
    )
    values["memory2_gib"] = f"{(memory_limit_bytes or 4 * 2**30) * 2 / 2**30:g}"
    text = found.step.format_map(values)
    command = _command(found.command, values)
    note = _at_full_size(found.at_full_size, row, config or {}, changes or {})
    passing = next((a for a in alternatives if a.passed), None)
    tried = tuple(a.describe() for a in alternatives if not a.passed)
    if passing is not None:  # proven: the model was run with it and every stage passed
        return NextStep(
            failure=found.failure,
            title=found.title,
            text=f"passes with {passing.label} (run: every stage passed with it); "
            f"the default fails: {found.title}",
            command=f"{base} --implementation {shlex.quote(passing.implementation)}",
            why=f"{passing.label} was run in a process of its own and every stage passed; "
            f"the default failed with {found.title}: {found.reason}",
            proven=passing.implementation,
            tried=tried,
            at_full_size=note,
        )
    return NextStep(
        failure=found.failure,
        title=found.title,
        text=text,
        command=command,
        why=found.reason,
        tried=tried,
        at_full_size=note,
    )


class _Blank(dict):  # a template's missing value reads as a dash, never a KeyError
    def __missing__(self, key: str) -> str:
        return "-"


def _command(template: str | None, values: Mapping[str, Any]) -> str | None:
    """A class's command with `values` filled in; None where it needs a value this answer does
    not know (the store, for `check`) or comes out empty: a command is printed only whole."""
    if not template:
        return None
    try:
        command = template.format_map(dict(values))
    except KeyError:
        return None
    return command or None


def install_command(message: str) -> str | None:
    """The command that installs what a `missing_package` skip's message says is missing: the
    locked route (`bash scripts/install.sh all,EXTRA`) for one of hfsweep's extras, as
    docs/install.md gives it, else the message's own `pip install`."""
    found = _INSTALL.search(message)
    if found is None:
        return None
    extra = _EXTRA.search(found.group(0))
    return f"bash scripts/install.sh all,{extra.group(1)}" if extra else found.group(0)


def _values(
    row: Mapping[str, Any], *, model: str, device: str, check: str, timeout_s: float | None
) -> _Blank:
    install = install_command(row.get("error_message") or "")
    ops = list(row.get("unverified_ops") or row.get("fallback_ops") or [])
    shown = ", ".join(ops[:3]) + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")
    count = int(row.get("fallback_op_count") or 0)
    if not ops and row.get("unverified"):  # a summary: its ops are counted, not named
        shown = "the ops no evidence decides"
    elif not ops and count:
        shown = f"{count} op{'s' if count != 1 else ''}"
    values = _Blank(
        model=model,
        model_q=shlex.quote(model),
        device=device,
        check=check,
        op=row.get("failing_op") or "an op",
        stage=row.get("stage") or "a stage",
        status=row.get("status") or "-",
        dtype=row.get("dtype") or "the dtype",
        error_type=row.get("error_type") or "an error",
        reason=row.get("reason") or "no reason given",
        install=install or "install it (the message names it)",
        install_command=install or "",
        ops=shown or "some ops",
    )
    if timeout_s:
        values["timeout"] = f"{timeout_s:g} s"
        values["timeout2_s"] = f"{timeout_s * 2:g}"
    else:
        values["timeout"] = "its time limit"
        values["timeout2_s"] = "1200"
    return values


# ---- what the full-size model meets, where the tiny input's size decides --------------------


def _at_full_size(
    note: Mapping[str, str] | None,
    row: Mapping[str, Any],
    config: Mapping[str, Any],
    changes: Mapping[str, Any],
) -> str | None:
    if note and note.get("note") == "routed_rows":
        return routed_rows_note(row.get("error_message") or "", config, changes, note)
    return None


def full_size_value(key: str, config: Mapping[str, Any], changes: Mapping[str, Any]) -> Any:
    """A config value at full size: the original where the shrink changed it (`changes`:
    dotted key -> [original, shrunk]), else the shrunk config's own (top level or text_config)."""
    for dotted in (key, f"text_config.{key}"):
        change = changes.get(dotted)
        if isinstance(change, list) and len(change) == 2:
            return change[0]
    for scope in (config, config.get("text_config") or {}):
        if isinstance(scope, Mapping) and key in scope:
            return scope[key]
    return None


def routed_rows_note(
    message: str,
    config: Mapping[str, Any],
    changes: Mapping[str, Any],
    patterns: Mapping[str, str],
) -> str | None:
    """A grouped matmul's routing precondition at full size: whether the tiny input's rows
    alone decide it, and what a full-size batch meets. `patterns` read the device's error
    text (its class's `at_full_size`): `align` (the multiple required), `offsets` (each
    expert's offset, comma-separated) and `rows` (the multiple and the rows it got)."""
    align_m = re.search(patterns["align"], message)
    if align_m is None:
        return None
    align = int(align_m.group(1))
    top_k = next(
        (
            v
            for v in (full_size_value(k, config, changes) for k in EXPERTS_PER_TOKEN_KEYS)
            if isinstance(v, int) and v > 0
        ),
        None,
    )
    tokens = align // math.gcd(align, top_k) if top_k else None
    full = (
        f"a full-size batch routes tokens x {top_k} rows (top-{top_k}), a multiple of {align} "
        f"for any multiple of {tokens} tokens"
        if top_k
        else f"a full-size batch routes tokens x experts-per-token rows, a multiple of {align} "
        "once padded"
    )
    offsets = re.search(patterns["offsets"], message)
    if offsets is not None:
        values = [int(v) for v in offsets.group(1).replace(" ", "").split(",") if v]
        shown = ", ".join(map(str, values[:8]))
        return (
            f"not the tiny input's size: its {values[-1] if values else '?'} routed rows are a "
            f"multiple of {align}, as {full}; but each expert's offset must be one too and the "
            f"router decides those ({shown} here) at every size, so the default is blocked at "
            "full size as well"
        )
    got = re.search(patterns["rows"], message)
    if got is not None:
        return (
            f"the tiny input routed {got.group(2)} rows; {full}; each expert's offset must be "
            f"a multiple of {align} too, which the router decides at every size"
        )
    return None
