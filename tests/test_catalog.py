"""The bundled catalog (`catalog refresh` against a local Hub: tests/test_hub_client.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ground.errors import UsageError
from model_configs.catalog import load_catalog
from tests.conftest import SHARED


def test_bundled_catalog_matches_the_shared_snapshot():
    catalog = load_catalog("bundled")
    assert len(catalog.entries) == 1000
    assert [e.rank for e in catalog.entries] == list(range(1, 1001))
    first = catalog.entries[0]
    assert first.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert first.downloads == 152018449
    assert first.model_type_hint == "bert"
    assert sum(e.custom_code for e in catalog.entries) == 71
    shared = SHARED / "data" / "hub-top1000-2026-02-09.csv"
    if shared.exists():  # the bundled copy is the shared snapshot, byte for byte
        bundled = Path(__file__).parents[1] / "model_configs/data/catalogs" / shared.name
        assert bundled.read_bytes() == shared.read_bytes()


def test_top_and_get():
    catalog = load_catalog("bundled")
    assert [e.rank for e in catalog.top(3)] == [1, 2, 3]
    assert catalog.get("google-bert/bert-base-uncased").rank == 4
    assert catalog.get("no/such-model") is None


def test_missing_or_bad_catalog_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_catalog(str(tmp_path / "missing.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("name,downloads\nx,1\n")
    with pytest.raises(UsageError, match="model_id"):
        load_catalog(str(bad))


def test_rows_without_rank_are_ranked_by_position(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("model_id,downloads_30d\na/b,10\nc/d,5\n")
    catalog = load_catalog(str(path))
    assert [(e.model_id, e.rank) for e in catalog.entries] == [("a/b", 1), ("c/d", 2)]
