"""Result reuse by content: a unique tiny-model task's key, and the earlier rows a run may copy.

A task's key is everything that can change its rows (DESIGN.md, Contracts):
- the shrunk config's hash (`TinySpec.hash`: the library, the class and the tiny config, in its
  canonical form: fields that change no op set to one value, `Adapter.canonical`), and what a
  key means (`KEY_VERSION`);
- the library's adapter package version, and torch, transformers, diffusers and the device
  package versions (the run's settings);
- the task's dtype (a run of several dtypes has a task per dtype);
- the device, real or emulated, its profile and the profile's hash; the stages,
  `--strict`, the compile backend and mode, the timeout and the memory limit (the run's
  settings, as a resume compares them, less the catalog: a model's content is its config);
- a hash of the code that decides a row (`code_hash`: the packages that resolve, shrink, build
  and run a model and turn its outcome into rows, data files included), which changes with
  every edit where the project version would not; the Python version; and the test-only fault
  rules that act inside a task (`runners.faults`).
Equal keys give equal rows. `hfsweep run --reuse latest|RUN_ID|all` copies the rows of every
task whose key an earlier run of the store has (its results, fallbacks and alternatives) into
this run, with `reused_from` naming the run that ran it, and runs only the new keys. A task
whose outcome has a `timeout`, `crash` or `oom` stage (its alternatives' included) is never
copied: those may be the machine's doing (a starved worker, a neighbour's memory), so the task
runs again.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from pathlib import Path
from typing import Any

from ground.errors import UsageError
from ground.schema import Status
from reports.store import Store
from sizing.hardware import HARDWARE_FILE

ROOT = Path(__file__).resolve().parent.parent
# What a task key and a plan key mean. A new version whenever a key would map the same content to
# other rows or another plan, so that an older store's keys match nothing: its tasks run again
# and its entries are planned again, never read as if they meant what they mean now.
# 2: tiny configs in canonical form (`Adapter.canonical`), a tiny model's hash names the ops.
KEY_VERSION = 2
# What decides a row: resolving, shrinking, building and running a model (with their data
# files), the stages' status vocabulary and error signatures, the failure classes that pick the
# alternatives a failing model runs again with (the core table here, each device's in its folder
# under runners/), and the mapping of an outcome to rows. Not: the driver, executors, writer,
# reports and dashboard, which move rows or read them.
# A plan (`sweep/plans.py`, keyed by this hash too) holds each model's size at full size, so the
# measure (`sizing/measure.py`) is here; the rest of `sizing/` (the hardware model, the formula,
# the rows) is applied by the driver to each run's sizing rows and decides no task's rows.
CODE = (
    "model_configs",
    "runners",
    "sizing/measure.py",
    "ground/schema.py",
    "ground/errors.py",
    "ground/next_steps.py",
    "ground/data/next_steps.json",
    "sweep/plan.py",
    "sweep/rows.py",
)
CODE_SUFFIXES = (".py", ".json", ".txt", ".yaml")
# In those folders but deciding no task's rows: each device's hardware figures, kept in the
# device's folder and read by `sizing.hardware` for the sizing rows (a corrected figure reruns
# no model).
NOT_CODE = (f"runners/devices/*/{HARDWARE_FILE}",)
# Run settings that are not part of a task's content: the catalog (a model's content is its
# resolved config, in the shrunk config's hash) and where the run was made.
# The dtype is each task's own (a run may sweep several): `KeyContext.key` adds it.
NOT_IN_KEY = frozenset({"catalog", "catalog_hash", "project_version", "dtype"})
NOT_REUSED = frozenset({Status.TIMEOUT.value, Status.CRASH.value, Status.OOM.value})


def code_files() -> list[Path]:
    """The files of `CODE` (less `NOT_CODE`), in path order within each entry."""
    out = []
    for name in CODE:
        path = ROOT / name
        files = (
            [path]
            if path.is_file()
            else sorted(p for p in path.rglob("*") if p.suffix in CODE_SUFFIXES)
        )
        for f in files:
            rel = f.relative_to(ROOT).as_posix()
            if "__pycache__" in f.parts or any(fnmatch(rel, p) for p in NOT_CODE):
                continue
            out.append(f)
    return out


@cache
def code_hash() -> str:
    """sha256 of the code that decides a row (`code_files`), file by file."""
    digest = hashlib.sha256()
    for f in code_files():
        digest.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def adapter_versions() -> dict[str, str | None]:
    """The installed version of each library adapter's package (None: not installed)."""
    from model_configs.libraries import ADAPTERS, get_adapter
    from sweep.settings import package_version

    out: dict[str, str | None] = {}
    for library in ADAPTERS:
        package = getattr(get_adapter(library), "package", None)
        out[library] = package_version(package) if package else None
    return out


def task_fault_rules() -> list[dict[str, Any]]:
    """The test-only fault rules that act inside a model task (they change its rows)."""
    from runners import faults

    return [
        r
        for r in faults.rules()
        if str(r.get("at", "")).startswith(("task", "setup", "stage:", "rank"))
    ]


@dataclass(frozen=True)
class KeyContext:
    """What every task key of one run shares, hashed once; `key(spec)` adds the task's own."""

    run_part: str
    versions: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, settings: dict[str, Any]) -> KeyContext:
        """From the run's settings row (every setting and version that changes a row)."""
        shared = {k: v for k, v in sorted(settings.items()) if k not in NOT_IN_KEY}
        shared["code_hash"] = code_hash()
        shared["python"] = platform.python_version()
        shared["faults"] = task_fault_rules()
        text = json.dumps(shared, sort_keys=True, default=str)
        return cls(
            run_part=hashlib.sha256(text.encode()).hexdigest(),
            versions=tuple(sorted(adapter_versions().items())),
        )

    def key(self, spec: Any, dtype: str) -> str:
        """The key of the task that runs `spec` (a TinySpec) at `dtype` in this run."""
        package = dict(self.versions).get(spec.library)
        text = f"{KEY_VERSION}\0{self.run_part}\0{spec.library}\0{package}\0{spec.hash}\0{dtype}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def source_runs(store: Store, reuse: str | None, run_id: str) -> list[str]:
    """The runs whose rows this run may copy, newest first: `latest` (the newest other run),
    a run id, or `all`; none for None / `none`."""
    if reuse in (None, "", "none"):
        return []
    known = [r["run_id"] for r in store.runs() if r["run_id"] != run_id]
    if reuse == "latest":
        return known[:1]
    if reuse == "all":
        return known
    if reuse == run_id:
        raise UsageError(
            f"--reuse {reuse}: a run cannot reuse itself", hint="a resume keeps its own rows"
        )
    if reuse not in known:
        raise UsageError(
            f"--reuse {reuse!r}: no such run in the store",
            hint="give latest, all, none or a run id that `hfsweep report` lists",
        )
    return [reuse]


@dataclass
class Reusable:
    """One earlier task's outcome under its key, and the run that ran it."""

    key: str
    origin: str  # the run that ran it (a copy of a copy names the first run)
    lead: str
    attempt: int
    outcome: Any  # ModelOutcome


def reusable(store: Store, runs: Iterable[str]) -> Iterator[Reusable]:
    """Every task outcome of `runs` that may be copied: its lead's rows (one part at a time),
    with their fallbacks; none with a `timeout`, `crash` or `oom` stage."""
    for run_id in runs:
        for lead, rows, outcome in lead_outcomes(store, run_id, keyed=True):
            if any(r["status"] in NOT_REUSED for r in rows) or any(
                s.status in NOT_REUSED for a in outcome.alternatives for s in a.stages
            ):
                continue
            first = rows[0]
            yield Reusable(
                key=first["task_key"],
                origin=first.get("reused_from") or run_id,
                lead=lead,
                attempt=first["attempt"] or 1,
                outcome=outcome,
            )


def lead_outcomes(
    store: Store, run_id: str, *, keyed: bool = False
) -> Iterator[tuple[str, list[dict[str, Any]], Any]]:
    """(model, its stage rows, its ModelOutcome) of every model of `run_id` whose task ran (or
    was reused) for it, not a dedup member's copy, once per dtype of the run (its rows say
    which); `keyed`: only those with a task key."""
    from runners.outcome import AlternativeRun, ModelOutcome, StageResult

    fields = set(StageResult.__dataclass_fields__) - {"fallbacks"}
    fallback_parts = {p.rsplit("/", 1)[-1]: p for p in store.part_files("fallbacks", run_id)}
    alternative_parts = {p.rsplit("/", 1)[-1]: p for p in store.part_files("alternatives", run_id)}
    for part in store.part_files("results", run_id):
        rows = store.dataset("results", [part]).to_table().to_pylist()
        # a lead per (model, dtype): a run of several dtypes ran a task for each
        leads: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:
            if r["dedup_of"] is None and r["shrunk_config_hash"] and (r["task_key"] or not keyed):
                leads.setdefault((r["model_id"], r["dtype"]), []).append(r)
        if not leads:
            continue
        models = {model for model, _ in leads}
        # a fallback row's dtype is null in parts written when a run had one dtype
        ops: dict[tuple[str, str | None, str], list[dict[str, Any]]] = {}
        fb = fallback_parts.get(part.rsplit("/", 1)[-1])
        if fb:
            for f in store.dataset("fallbacks", [fb]).to_table().to_pylist():
                if f["model_id"] in models:
                    ops.setdefault((f["model_id"], f.get("dtype"), f["stage"]), []).append(
                        {k: f[k] for k in ("op", "count", "bytes_h2d", "bytes_d2h", "source")}
                    )
        # the switches of its own code each lead was run again with, stage rows in order
        tried: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
        alt = alternative_parts.get(part.rsplit("/", 1)[-1])
        if alt:
            for a in store.dataset("alternatives", [alt]).to_table().to_pylist():
                if a["dedup_of"] is None and (a["model_id"], a["dtype"]) in leads:
                    by = tried.setdefault((a["model_id"], a["dtype"]), {})
                    by.setdefault(a["implementation"], []).append(a)
        for (model, dtype), stage_rows in leads.items():
            stages = [
                StageResult(
                    **{k: v for k, v in r.items() if k in fields},
                    fallbacks=ops.get((model, dtype, r["stage"]))
                    or ops.get((model, None, r["stage"]), []),
                )
                for r in stage_rows
            ]
            first = stage_rows[0]
            timings = {"child_s": first["wall_s"]} if first.get("wall_s") is not None else {}
            outcome = ModelOutcome(
                stages,
                first["param_count"],
                first["worker"],
                timings=timings,
                peak_host_memory_bytes=first.get("peak_host_memory_bytes"),
                alternatives=[
                    AlternativeRun(
                        implementation,
                        [StageResult(**{k: v for k, v in r.items() if k in fields}) for r in rows],
                        rows[0]["wall_s"],
                    )
                    for implementation, rows in tried.get((model, dtype), {}).items()
                ],
            )
            yield model, stage_rows, outcome
