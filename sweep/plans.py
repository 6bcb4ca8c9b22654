"""Plans reused by content: what planning an entry gave, kept in the store and used again when
nothing it read has changed.

Planning an entry (resolve its config, shrink it: `sweep.plan.plan_entry`) reads only the
entry's catalog fields (not its rank, downloads or likes), the files a catalog refresh cached
for it, the code and data that resolve and shrink (`sweep.reuse.code_hash`), the installed
library packages, the stages asked for (a skip names them), whether the Hub may be asked, and
the test-only fault rules that act while planning. A plan's key is the hash of all of that, so
equal keys give equal plans. Online, an entry with no cached files is planned from what the Hub
serves today: it has no key and is always planned.

Every plan a run makes or takes is written beside its model's rows (`plans`, committed by the
results part of the same name). A run with `--reuse` takes the plans of the runs it may copy
rows from: an entry whose key one of them has is not planned again; only the entries that
changed are. With the task keys of `sweep.reuse`, a night on which nothing changed plans
nothing and runs nothing: it starts no Ray.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from model_configs.spec import CatalogEntry, TinySpec
from reports.store import Store
from runners.outcome import ModelOutcome, StageResult
from sweep.plan import Planned

# The catalog fields planning does not read: they change every night without changing a plan.
NOT_PLANNED_FROM = frozenset({"rank", "downloads", "likes"})
# Planned's own fields kept in a plan record (the entry is the catalog's, the config is dropped)
META = ("config_source", "config_hash", "library", "model_type", "quantization")
RECORD_VERSION = 3  # of a plan record's layout: part of every key (a new layout, new keys)


@dataclass(frozen=True)
class PlanKeys:
    """What every plan key of one run shares, hashed once; `key(entry)` adds the entry's own."""

    base: str
    config_dir: Path | None
    offline: bool

    @classmethod
    def of(cls, stages: Iterable[str], config_dir: str | Path | None) -> PlanKeys:
        from ground import settings
        from runners import faults
        from sweep.reuse import KEY_VERSION, adapter_versions, code_hash
        from sweep.settings import package_version

        versions = dict(adapter_versions())
        for package in ("torch", "transformers", "diffusers", "huggingface_hub"):
            versions[package] = package_version(package)
        offline = settings.hub_offline()
        shared = {
            "record": RECORD_VERSION,
            "keys": KEY_VERSION,
            "code_hash": code_hash(),
            "python": platform.python_version(),
            "versions": versions,
            "stages": list(stages),
            "offline": offline,
            "faults": [r for r in faults.rules() if r.get("at") == "plan"],
        }
        text = json.dumps(shared, sort_keys=True, default=str)
        folder = Path(config_dir) if config_dir else None
        return cls(hashlib.sha256(text.encode()).hexdigest(), folder, offline)

    def key(self, entry: CatalogEntry) -> str | None:
        """The key of planning `entry` (None: what it plans from cannot be known beforehand)."""
        fields = {k: v for k, v in entry.to_dict().items() if k not in NOT_PLANNED_FROM}
        digest = hashlib.sha256(self.base.encode() + b"\0")
        digest.update(json.dumps(fields, sort_keys=True, default=str).encode() + b"\0")
        files = self._files(entry.model_id)
        if files is None:
            return None
        for path, data in files:
            digest.update(path.encode() + b"\0" + data + b"\0")
        return digest.hexdigest()[:32]

    def _files(self, model_id: str) -> list[tuple[str, bytes]] | None:
        """The files cached for the model, by relative path; None when there are none and
        the Hub would be asked (online)."""
        from model_configs.hub import model_folder

        folder = model_folder(self.config_dir, model_id) if self.config_dir else None
        if folder is None or not folder.is_dir():
            return None if not self.offline else []
        return [
            (str(p.relative_to(folder)), p.read_bytes())
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        ]


ITEMS, TUPLE = "__hfsweep_items__", "__hfsweep_tuple__"


def _encode(value: Any) -> Any:
    """`value` as plain JSON that `_decode` gives back exactly: a dict whose keys are not all
    strings (`id2label`'s integers) as its items, a tuple tagged as one."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not {ITEMS, TUPLE} & set(value):
            return {k: _encode(v) for k, v in value.items()}
        return {ITEMS: [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TUPLE: [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {ITEMS}:
            return {_decode(k): _decode(v) for k, v in value[ITEMS]}
        if set(value) == {TUPLE}:
            return tuple(_decode(v) for v in value[TUPLE])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def plan_record(planned: Planned) -> str:
    """A plan as JSON: its spec, or the outcome planning decided, and what it says of the
    config (not the full-size config itself, nor the catalog entry)."""
    record: dict[str, Any] = {k: getattr(planned, k) for k in META}
    record["spec"] = _encode(planned.spec.to_dict()) if planned.spec is not None else None
    record["shrunk_config_hash"] = planned.shrunk_hash
    record["outcome"] = asdict(planned.outcome) if planned.outcome is not None else None
    record["size"] = planned.size.to_dict() if planned.size is not None else None
    return json.dumps(record, sort_keys=True, default=str)


def planned_from(record: str, entry: CatalogEntry) -> Planned | None:
    """The plan a record holds, for `entry` (today's catalog fields: rank, downloads); None
    when the record cannot give back the very plan it was made from."""
    from sizing.measure import ModelSize

    try:
        data = json.loads(record)
        spec = TinySpec.from_dict(_decode(data["spec"])) if data.get("spec") else None
        size = ModelSize.from_dict(data["size"]) if data.get("size") else None
        outcome = None
        if data.get("outcome"):
            raw = dict(data["outcome"])
            stages = [StageResult(**s) for s in raw.pop("stages")]
            outcome = ModelOutcome(stages=stages, **raw)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not a record this code reads (damaged, or another layout): plan again
    if spec is not None and spec.hash != data.get("shrunk_config_hash"):
        return None  # not the plan it was made from: plan it again
    if spec is None and outcome is None:
        return None
    planned = Planned(entry=entry, spec=spec, outcome=outcome, **{k: data.get(k) for k in META})
    planned.size = size
    return planned


@dataclass
class PlanCache:
    """The plans of the runs a run may reuse (by key, the newest run's first), and the keys of
    the entries being planned now."""

    keys: PlanKeys
    records: dict[str, str] = field(default_factory=dict)  # plan key -> record
    hits: int = 0
    planned: int = 0  # entries planned anew (a miss, or no key)

    @classmethod
    def load(cls, store: Store, runs: Iterable[str], keys: PlanKeys) -> PlanCache:
        cache = cls(keys)
        for run_id in runs:  # newest first: the first record per key wins
            # a part at a time: the whole table in Arrow beside its Python strings would hold
            # every record twice (and Arrow's pool keeps what it freed)
            for part in store.part_files("plans", run_id):
                table = store.dataset("plans", [part]).to_table(columns=["plan_key", "plan"])
                for key, record in zip(
                    table.column("plan_key").to_pylist(),
                    table.column("plan").to_pylist(),
                    strict=True,
                ):
                    if key:
                        cache.records.setdefault(key, record)
        return cache

    def take(self, entry: CatalogEntry, key: str | None) -> Planned | None:
        """The plan an earlier run made of this entry's content, or None (plan it)."""
        record = self.records.get(key) if key else None
        planned = planned_from(record, entry) if record is not None else None
        if planned is None:
            if key:  # a record that does not give its plan back is not offered again
                self.records.pop(key, None)
            self.planned += 1
            return None
        self.hits += 1
        planned.plan_key = key
        return planned


def plan_row(run_id: str, planned: Planned, taken: str | None = None) -> dict[str, Any] | None:
    """The plans row of a model (None: its plan has no key, it cannot be reused). `taken`: the
    record the plan was taken from (written again as it is: it gave this very plan back)."""
    if not planned.plan_key:
        return None
    record = taken or plan_record(planned)
    if taken is None and planned.spec is not None:
        spec = planned.spec.to_dict()
        back = _decode(json.loads(record)["spec"])
        if back != spec or _types(back) != _types(spec):
            return None  # a value JSON cannot hold as it is (an object): planned every night
    return {
        "run_id": run_id,
        "model_id": planned.entry.model_id,
        "plan_key": planned.plan_key,
        "plan": record,
    }


def _types(value: Any) -> Any:
    """The shape of `value` with the type of every leaf (1 == 1.0 == True in Python)."""
    if isinstance(value, dict):
        return {repr(k): _types(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_types(v) for v in value])
    return type(value).__name__
