"""The models table as a person sees it, measured in real headless Chromium: on a store whose
failures carry long real error messages and whose ids are long, no cell is narrower than a word
it holds (nothing broken inside a word to fit), an id breaks only after its "/", no row runs
tall, the banner says "emulated" once and no row repeats it, and the full error is each error
cell's tooltip. The static site's models list is searched in the page (its one script, allowed
by the page's own policy) and loads nothing from anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser_support import TABLE_LAYOUT_JS, browser_marks, served_dashboard
from tests.report_store_builder import build_hand_store, rows_for
from tests.store_writes import write_model_rows

pytestmark = browser_marks

# Real-sounding failures: numbers, names and paths in long messages, some naming long ops.
LONG_FAILURES = [
    (
        "an-organisation-with-a-long-name/Mixtral-8x22B-Instruct-v0.1-with-a-long-suffix",
        "forward",
        "ValueError",
        "t must be divisible by 128, got 64 (TorchNeuron's _grouped_mm precondition; "
        "TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1 skips it) " + "while routing experts " * 12,
        "aten::_grouped_mm",
    ),
    (
        "pyannote/speaker-diarization-community-1-with-a-long-name",
        "compile",
        "UnlowerableOpError",
        "aten::_native_batch_norm_legit_no_training cannot be lowered by the neuron compiler; "
        "TorchNeuron raises when a graph fails to compile "
        "(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1, its released default)",
        "aten::_native_batch_norm_legit_no_training",
    ),
    (
        "someone/a-model",
        "backward",
        "RuntimeError",
        "The size of tensor a (4096) must match the size of tensor b (1024) at non-singleton "
        "dimension 3; see /usr/lib/python3/site-packages/transformers/models/llama/"
        "modeling_llama.py:412 " + "and the rest of a long traceback line " * 10,
        None,
    ),
    (
        "no-org-model-with-an-unusually-long-single-segment-identifier-v2",
        "load",
        "TypeError",
        "LlamaForCausalLM.__init__() got an unexpected keyword argument 'rope_scaling_type' "
        "in a config that names " + "a great many keys " * 15,
        None,
    ),
]


def build_long_error_store(root: Path) -> None:
    """The hand-built store, and in its run r2 also models with long ids and long errors."""
    from reports.store import Store
    from tests import report_store_builder as b

    build_hand_store(root)
    store = Store(root)
    for model_id, stage, kind, message, op in LONG_FAILURES:
        at = b.STAGES.index(stage)
        statuses = ["pass"] * at + ["fail"] + ["not_run"] * (len(b.STAGES) - at - 1)
        res, _ = rows_for(
            "r2", "org/a-pass-clean", statuses, error=(stage, kind, message, kind, op)
        )
        for r in res:
            r.update(
                model_id=model_id,
                downloads=40,
                pipeline_tag="text-generation",
                model_type="mixtral",
                architecture="MixtralForCausalLM",
            )
        write_model_rows(store, "r2", res, [], b.configs_for(res))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("long-errors") / "store"
    build_long_error_store(root)
    with served_dashboard(root) as base:
        yield base


@pytest.mark.parametrize("path", ["/models?outcome=failed", "/models"])
def test_no_cell_is_squeezed_and_no_row_runs_tall(server: str, browser, path: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(server + path)
    m = page.evaluate(TABLE_LAYOUT_JS, "#models")
    assert m["rows"] >= 7
    assert m["squeezed_cells"] == 0, m["worst"]  # no text broken inside a word to fit
    assert m["broken_ids"] == 0  # an id wraps after its "/" only
    line = page.evaluate("parseFloat(getComputedStyle(document.body).lineHeight)")
    assert m["tallest_row"] <= 6 * line, m  # was hundreds of pixels with a squeezed column
    assert m["height"] <= m["rows"] * 4 * line
    # the banner says "emulated" once; rows do not repeat it
    assert page.locator(".emulated").count() == 1
    assert "emulated" not in page.locator("#models tbody").inner_text()
    page.close()


def test_the_full_error_is_the_cells_tooltip(server: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(server + "/models?outcome=failed&sort=model_id&order=asc")
    model_id, _, kind, message, _ = LONG_FAILURES[2]
    row = page.locator("#models tbody tr", has_text=model_id.split("/")[1])
    cell = row.locator("td.err")
    assert cell.get_attribute("title") == f"{kind}: {message}"
    shown = cell.inner_text()
    assert shown.startswith("RuntimeError: The size of tensor a (4096) must match")  # numbers
    assert shown.endswith("…") and len(shown) <= 91
    op_row = page.locator("#models tbody tr", has_text="Mixtral-8x22B")
    assert op_row.locator("td.err a.op").inner_text() == "aten::_grouped_mm"
    page.close()


def test_static_site_search_runs_offline(tmp_path: Path, browser) -> None:
    from reports.query import StoreQuery
    from reports.render import html_site
    from reports.summary import run_report

    build_long_error_store(tmp_path / "s")
    q = StoreQuery(tmp_path / "s")
    html_site.write_site(q, run_report(q), tmp_path / "site")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto((tmp_path / "site" / "models.html").as_uri() + "?q=pyannote")
    # the page's policy allows its one script: it ran and filtered the list
    assert page.locator("#model-search").input_value() == "pyannote"
    assert page.locator("#models tbody tr:visible").count() == 1
    assert page.locator("#search-count").inner_text() == "1 of 12 models"
    page.fill("#model-search", "fill-mask bert")
    assert page.locator("#models tbody tr:visible").count() == 1  # bert-x
    page.fill("#model-search", "")
    assert page.locator("#models tbody tr:visible").count() == 12
    m = page.evaluate(TABLE_LAYOUT_JS, "#models")
    assert m["squeezed_cells"] == 0 and m["broken_ids"] == 0, m["worst"]
    page.locator("#models tbody tr", has_text="c-fail-compile").locator("a").first.click()
    page.wait_for_load_state()
    assert page.locator("#model-id").inner_text() == "org/c-fail-compile"
    page.locator("#stages a", has_text="aten::nonzero").click()
    page.wait_for_load_state()
    assert page.locator("#op-name").inner_text() == "aten::nonzero"
    assert page.locator("#op-failing tbody tr").count() == 1
    assert requests and all(u.startswith("file://") for u in requests), requests
    page.close()
