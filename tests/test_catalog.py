"""The bundled catalog and `catalog refresh` against recorded Hub API responses."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from model_configs.catalog import load_catalog, refresh_catalog
from reports.errors import UsageError
from tests.conftest import FIXTURES, SHARED


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


def _replay_hub(monkeypatch, recorded: dict) -> list[str]:
    """Serve the Hub API from recorded responses; any other request fails the test."""
    import huggingface_hub

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        path = request.url.path
        if path == "/api/models":
            assert request.url.params["sort"] == "downloads"
            limit = int(request.url.params["limit"])
            return httpx.Response(200, json=recorded["models"][:limit])
        for repo_id, files in recorded["files"].items():
            for name, body in files.items():
                if path.endswith(f"/{repo_id}/resolve/main/{name}"):
                    data = json.dumps(body).encode()
                    return httpx.Response(
                        200,
                        content=data,
                        headers={
                            "etag": f'"{abs(hash(data))}"',
                            "x-repo-commit": "0" * 40,
                            "content-length": str(len(data)),
                        },
                    )
        if "/resolve/" in path:
            return httpx.Response(404, headers={"x-error-code": "EntryNotFound"})
        raise AssertionError(f"unexpected request {request.method} {request.url}")

    transport = httpx.MockTransport(handler)
    huggingface_hub.set_client_factory(lambda: httpx.Client(transport=transport))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return seen


def test_refresh_from_recorded_hub_responses(tmp_path, monkeypatch):
    import huggingface_hub

    recorded = json.loads((FIXTURES / "hub_list_models.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    seen = _replay_hub(monkeypatch, recorded)
    try:
        out = tmp_path / "catalog.csv"
        catalog = refresh_catalog(3, out, api=huggingface_hub.HfApi(endpoint="https://hub.test"))
    finally:
        huggingface_hub.set_client_factory(httpx.Client)  # back to the default
    assert [e.model_id for e in catalog.entries] == [
        "sentence-transformers/all-MiniLM-L6-v2",
        "acme/remote-model",
        "stabilityai/sdxl-like",
    ]
    first, remote, diffusion = catalog.entries
    assert first.model_type_hint == "bert" and first.library == "sentence-transformers"
    assert remote.custom_code is True
    assert diffusion.library == "diffusers"
    # configs only, never weights
    fetched = sorted(
        p.relative_to(out.with_suffix("")).as_posix() for p in out.with_suffix("").rglob("*.json")
    )
    assert fetched == [
        "acme/remote-model/config.json",
        "sentence-transformers/all-MiniLM-L6-v2/config.json",
        "stabilityai/sdxl-like/model_index.json",
    ]
    assert not any("safetensors" in s or ".bin" in s for s in seen)
    assert json.loads(out.with_suffix(".json").read_text())["models"] == 3
