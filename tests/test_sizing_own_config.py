"""A size is a fact only when it was built from the repo's own config: a model sized from its
library's default config is "not sized: no config of its own" in every aggregate, filter and
column, and counted in their denominators (docs/sizing.md). A hand-built store, no sweep."""

from __future__ import annotations

import pytest

from reports.models import ModelFilter, model_detail, model_table
from reports.query import StoreQuery
from reports.render.text import render as render_text
from reports.store import Store
from reports.summary import run_report
from tests.report_store_builder import ALL_PASS, configs_for, rows_for

OWN, DEFAULT = "org/a-pass-clean", "org/b-pass-fallback"  # 1,000 and 500 downloads


def sizing_row(config_hash: str, source: str, parameters: int, serve: int) -> dict:
    return {
        "run_id": "r", "config_hash": config_hash, "config_source": source,
        "architecture": "LlamaForCausalLM", "status": "ok", "parameters": parameters,
        "bytes_fp32": 4 * parameters, "bytes_bf16": 2 * parameters, "bytes_fp8": parameters,
        "hardware": "trn2", "primary_hardware": True, "core_memory_bytes": 24 << 30,
        "cores_per_chip": 4, "cores_per_instance": 64, "serve_context": 4096, "serve_batch": 1,
        "serve_bytes": 2 * parameters, "finetune_bytes": 16 * parameters,
        "lora_bytes": 3 * parameters, "serve_cores": serve, "finetune_cores": 4 * serve,
        "lora_cores": serve,
    }  # fmt: skip


@pytest.fixture(scope="module")
def query(tmp_path_factory) -> StoreQuery:
    root = tmp_path_factory.mktemp("own-config")
    store = Store(root)
    results, fallbacks = [], []
    for model_id, source, config_hash in (
        (OWN, "hub", "own"),
        (DEFAULT, "transformers_default", "default"),
    ):
        res, fbs = rows_for("r", model_id, ALL_PASS)
        for row in res:
            row.update(config_source=source, config_hash=config_hash)
        results += res
        fallbacks += fbs
    # the default config is a 12B one: a size the model is not known to have
    sizing = [
        sizing_row("own", "hub", 8_030_261_248, 1),
        sizing_row("default", "transformers_default", 12_050_000_000, 2),
    ]
    # one batch, as a run writes it: the results part commits the sizing part of its name
    store.write_parts(
        "r",
        {
            "fallbacks": fallbacks,
            "configs": configs_for(results),
            "sizing": sizing,
            "results": results,
        },
    )
    return StoreQuery(str(root))


def test_the_models_table_sizes_only_a_model_with_its_own_config(query):
    rows = {r["model_id"]: r for r in model_table(query, "r", ModelFilter())["rows"]}
    assert rows[OWN]["parameters"] == 8_030_261_248 and rows[OWN]["serve_cores"] == 1
    assert rows[OWN]["sizing_status"] == "ok"
    assert rows[DEFAULT]["parameters"] is None and rows[DEFAULT]["serve_cores"] is None
    assert rows[DEFAULT]["sizing_status"] == "no_own_config"
    # the default's 12B does not put the model in the 10B-100B range, nor on a core count
    assert model_table(query, "r", ModelFilter(params="10b_100b"))["total"] == 0
    assert [
        r["model_id"] for r in model_table(query, "r", ModelFilter(params="1b_10b"))["rows"]
    ] == [OWN]
    assert model_table(query, "r", ModelFilter(fit="serve_one_chip"))["total"] == 1
    assert [
        r["model_id"] for r in model_table(query, "r", ModelFilter(fit="not_sized"))["rows"]
    ] == [DEFAULT]


def test_cores_needed_counts_the_default_config_model_as_not_sized(query):
    report = run_report(query, "r")
    c = report["cores_needed"]
    assert (c["models"], c["sized"], c["no_own_config"]) == (2, 1, 1)
    assert c["sized_downloads_share"] == pytest.approx(1000 / 1500)
    assert c["no_own_config_downloads_share"] == pytest.approx(500 / 1500)
    serve = {b["cores"]: b["serve_models"] for b in c["buckets"] if b["serve_models"]}
    assert serve == {"1": 1}  # the default's 2 cores counted nowhere
    text = render_text(report)
    assert "Sized from the repo's own config: 1 (50.0%) models" in text
    assert "no config of its own 1 (33.3% of downloads)" in text


def test_the_pages_label_the_default_and_give_unsized_cells_the_unsized_tooltip(query, tmp_path):
    from reports.render import html_site

    detail = model_detail(query, DEFAULT, "r")
    assert detail["config_is_default"] and detail["full_size"][0]["parameters"] == 12_050_000_000
    html_site.write_site(query, run_report(query, "r"), tmp_path / "site")
    page = (tmp_path / "site" / "models" / html_site.model_file_name(DEFAULT)).read_text()
    assert (
        "Not sized: no config of its own" in page and "The default config: 12,050,000,000" in page
    )
    own = (tmp_path / "site" / "models" / html_site.model_file_name(OWN)).read_text()
    assert "Not sized" not in own and "from the model&#39;s own config" in own
    # docs/sizing.md, named in the report's notes, is a link to the copy beside the site
    index = (tmp_path / "site" / "index.html").read_text()
    assert '<a class="doc" href="docs/sizing.md">docs/sizing.md</a>' in index
    assert (tmp_path / "site" / "docs" / "sizing.md").is_file()
    assert 'href="../docs/sizing.md"' in own
    table = (tmp_path / "site" / "models.html").read_text()
    assert table.count('title="not sized: no config of its own') == 3  # params, serve, fine-tune
    assert "parameters at full size, from the repo&#39;s own config" in table
