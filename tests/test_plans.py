"""Plans reused by content (`sweep.plans`): an entry whose inputs have not changed is not planned
again by a run with --reuse, a changed one is, and a night with nothing new plans nothing, runs
nothing and starts no executor. Planning is real (config files on disk, real catalogs); the model
task is the stand-in of tests/test_reuse.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from ground.schema import Stage
from model_configs.catalog import load_catalog
from model_configs.spec import CatalogEntry
from reports.store import Store
from sweep import driver
from sweep.plan import plan_entries
from sweep.plans import PlanCache, PlanKeys, plan_record, plan_row, planned_from
from tests.test_reuse import RAN, comparable, sweep
from tests.test_reuse import cat as cat  # noqa: F401  (the fixture)

STAGES = [Stage.LOAD, Stage.FORWARD]


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The entries plan tasks planned, in order."""
    planned: list[str] = []
    real = driver.plan_task

    def plan_task(entries, stages, config_dir):
        planned.extend(e.model_id for e in entries)
        return real(entries, stages, config_dir)

    monkeypatch.setattr(driver, "plan_task", plan_task)
    return planned


def keys_for(tmp_path: Path, stages=("load", "forward")) -> PlanKeys:
    return PlanKeys.of(list(stages), tmp_path / "catalog")


def test_a_key_is_the_content_planning_reads(tmp_path, cat, monkeypatch):
    entry = CatalogEntry("org/b", rank=2, downloads=10, library="transformers")
    keys = keys_for(tmp_path)
    key = keys.key(entry)
    assert key and len(key) == 32
    # what changes every night and planning never reads: the same key
    assert keys.key(replace(entry, rank=9, downloads=10**6, likes=3)) == key
    # what planning reads: another key
    assert keys.key(replace(entry, model_type_hint="mistral")) != key
    assert keys.key(replace(entry, tags=("fp8",))) != key
    assert keys_for(tmp_path, ("load",)).key(entry) != key
    path = tmp_path / "catalog" / "org" / "b" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "rope_theta": 1e6}))
    assert keys.key(entry) != key
    # a new file in the model's cached folder (a refresh's record, another config) too
    (path.parent / "generation_config.json").write_text("{}")
    changed = keys.key(entry)
    assert changed not in (None, key)
    # a plan fault rule acts while planning: part of the key
    monkeypatch.setenv("HFSWEEP_TEST_FAULTS", json.dumps({"at": "plan", "fault": "raise"}))
    assert keys_for(tmp_path).key(entry) != changed


def test_online_an_entry_without_cached_files_has_no_key(tmp_path, monkeypatch):
    entry = CatalogEntry("org/nothing-cached", library="transformers")
    assert keys_for(tmp_path).key(entry) is not None  # offline: planned from defaults alone
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert keys_for(tmp_path).key(entry) is None  # the Hub decides: always planned


def test_a_plan_survives_its_record_for_many_architectures():
    """Real plans of the bundled catalog's top 120 (transformers, diffusers, timm, sentence-
    transformers, skips, shrink failures) come back from their record as they were made: one
    entry per architecture the catalog names (library, model type, architectures), every entry
    that names none."""
    catalog = load_catalog("bundled")
    entries, seen = [], set()
    for entry in catalog.top(120):
        kind = (entry.library, entry.model_type_hint, entry.architectures_hint)
        if entry.model_type_hint is None or kind not in seen:
            entries.append(entry)
            seen.add(kind)
    assert len(entries) >= 60
    planned = plan_entries(entries, STAGES, config_dir=catalog.config_dir)
    libraries, decided = set(), 0
    for p in planned:
        p.plan_key = "k"
        assert plan_row("r", p) is not None, p.entry.model_id  # every one of them is kept
        back = planned_from(plan_record(p), p.entry)
        assert back is not None, p.entry.model_id
        assert back.shrunk_hash == p.shrunk_hash
        assert back.spec == p.spec and back.outcome == p.outcome, p.entry.model_id
        for name in ("config_source", "config_hash", "library", "model_type", "quantization"):
            assert getattr(back, name) == getattr(p, name), (p.entry.model_id, name)
        libraries.add(p.library)
        decided += p.outcome is not None
    assert len(libraries) >= 4 and decided >= 5


def test_a_config_json_cannot_hold_is_planned_again(tmp_path, cat):
    entry = CatalogEntry("org/a", library="transformers")
    planned = plan_entries([entry], STAGES, config_dir=tmp_path / "catalog")[0]
    assert planned.spec is not None
    planned.plan_key = "k"
    assert plan_row("r", planned) is not None
    # integer keys and tuples come back as they were (a plain JSON round trip would not)
    planned.spec.config["id2label"] = {0: "LABEL_0"}
    planned.spec.config["sizes"] = (1, [2, (3.0, True)])
    back = planned_from(plan_row("r", planned)["plan"], entry)
    assert back is not None and back.spec == planned.spec and back.shrunk_hash
    assert back.spec.config["id2label"] == {0: "LABEL_0"}
    # a value JSON cannot hold (an object) is not kept: that entry is planned every night
    planned.spec.config["dtype"] = torch.float16
    assert plan_row("r", planned) is None
    del planned.spec.config["dtype"]
    # a record that does not give back the plan it was made from is not taken
    record = json.loads(plan_record(planned))
    record["shrunk_config_hash"] = "0" * 16
    assert planned_from(json.dumps(record), entry) is None
    for damaged in ("{", "[]", json.dumps({"spec": {"nope": 1}}), json.dumps({"outcome": 3})):
        assert planned_from(damaged, entry) is None, damaged
    cache = PlanCache(keys_for(tmp_path), {"k": json.dumps(record)})
    assert cache.take(entry, "k") is None and (cache.hits, cache.planned) == (0, 1)
    assert "k" not in cache.records  # not offered again, nor written again as a taken record


def test_a_night_with_nothing_new_plans_nothing_and_starts_nothing(tmp_path, cat, counted):
    first = sweep(tmp_path, "one")
    assert sorted(counted) == ["org/a", "org/b", "org/c", "org/d"] and first.started_executor
    plans = Store(tmp_path / "store").read("plans", "one").to_pylist()
    assert sorted(r["model_id"] for r in plans) == ["org/a", "org/b", "org/c", "org/d"]
    counted.clear()
    second = sweep(tmp_path, "two", "latest")
    assert counted == [] and RAN == []
    assert (second.plans_reused, second.reused, second.started_executor) == (4, 4, False)
    store = Store(tmp_path / "store")
    # the rows are the first run's, but for what a copy changes
    a, b = store.read("results", "one").to_pylist(), store.read("results", "two").to_pylist()
    assert sorted(map(comparable, a)) == sorted(map(comparable, b))
    # and the plans it took are its own, the very records it took: a third night takes them
    # from the second
    taken = {r["plan_key"]: r["plan"] for r in store.read("plans", "one").to_pylist()}
    again = {r["plan_key"]: r["plan"] for r in store.read("plans", "two").to_pylist()}
    assert again == taken and len(again) == 4
    counted.clear()
    third = sweep(tmp_path, "three", "latest")
    assert counted == [] and third.plans_reused == 4 and third.reuse_sources == ["two"]


def test_only_the_changed_entry_is_planned_and_run(tmp_path, cat, counted):
    sweep(tmp_path, "one")
    path = tmp_path / "catalog" / "org" / "b" / "config.json"
    changed = {**json.loads(path.read_text()), "num_key_value_heads": 4, "rope_theta": 1e6}
    path.write_text(json.dumps(changed))
    counted.clear()
    second = sweep(tmp_path, "two", "latest")
    assert counted == ["org/b"] and RAN == ["org/b"]
    assert second.plans_reused == 3 and second.reused == 3 and second.started_executor
    rows = Store(tmp_path / "store").read("results", "two").to_pylist()
    assert {r["model_id"] for r in rows if r["reused_from"] is None} == {"org/b"}
    # rank order holds across taken and fresh plans: org/d is still org/a's member
    assert {r["dedup_of"] for r in rows if r["model_id"] == "org/d"} == {"org/a"}


def test_plans_are_not_taken_without_reuse_nor_across_stages(tmp_path, cat, counted):
    sweep(tmp_path, "one")
    counted.clear()
    sweep(tmp_path, "two")  # no --reuse: a fresh plan of everything
    assert sorted(counted) == ["org/a", "org/b", "org/c", "org/d"]
    counted.clear()
    sweep(tmp_path, "three", "all", stages="load")  # a skip names its stages: planned again
    assert sorted(counted) == ["org/a", "org/b", "org/c", "org/d"]


def test_a_run_from_before_plans_were_kept_is_reused_after_planning(tmp_path, cat, counted):
    """A store written before the plans table: nothing to take, the rows are still copied."""
    sweep(tmp_path, "one")
    for part in (tmp_path / "store" / "plans").rglob("*.parquet"):
        part.unlink()
    counted.clear()
    second = sweep(tmp_path, "two", "latest")
    assert sorted(counted) == ["org/a", "org/b", "org/c", "org/d"] and RAN == []
    assert second.plans_reused == 0 and second.reused == 4


def rows(store: Path, run_id: str) -> list[dict[str, Any]]:
    return Store(store).read("results", run_id).to_pylist()
