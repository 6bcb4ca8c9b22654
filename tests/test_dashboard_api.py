"""Every dashboard endpoint, HTML and JSON, on the hand-built store: figures, 404s, 400s and
hostile strings (a model id and an error message holding `<script>`)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from dashboard.app import create_app, model_url
from tests.report_store_builder import EVIL_ID, EVIL_MESSAGE, build_hand_store
from tests.store_writes import write_model_rows


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    root = tmp_path_factory.mktemp("dash") / "store"
    build_hand_store(root)
    return TestClient(create_app(str(root), refresh_s=0, warm=False))


def no_live_script(html: str) -> None:
    assert "<script>alert" not in html
    assert "<script" not in html.replace("&lt;script", "")


def test_overview_html(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "Coverage of run r2" in html
    assert 'data-emulated="true"' in html and "neuron (emulated)" in html
    assert "73.6%" in html  # passed every stage by downloads: 1700 / 2310
    assert "<svg" in html  # charts drawn inline
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html  # nothing fetched from the internet
    no_live_script(html)
    # a failure cluster shows the real error (its numbers, its words), not the signature
    assert "ValueError: &lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt; &amp;" in html
    assert "alert(N)" not in html
    # tables link to the models behind each line
    assert 'href="/models?run=r2&amp;architecture=LlamaForCausalLM"' in html
    assert 'href="/models?run=r2&amp;signature=RuntimeError%3A+boom"' in html
    assert 'href="/models?run=r2&amp;library=gguf"' in html


def test_overview_api(client: TestClient) -> None:
    data = client.get("/api/overview").json()
    d = data["denominators"]
    assert (d["models"], d["skipped"], d["failed"], d["passed"]) == (8, 2, 3, 3)
    assert data["headline"]["passing_share"] == pytest.approx(0.25)
    assert client.get("/api/overview", params={"run": "r1"}).json()["run_id"] == "r1"


def test_unknown_and_bad_run(client: TestClient) -> None:
    r = client.get("/api/overview", params={"run": "r9"})
    assert r.status_code == 404 and "r9" in r.json()["error"]
    r = client.get("/", params={"run": "../etc"})
    assert r.status_code == 400 and "invalid run id" in r.text


def test_models_api_filters(client: TestClient) -> None:
    r = client.get("/api/models", params={"per_page": 3})
    data = r.json()
    assert data["total"] == 8 and data["pages"] == 3 and len(data["rows"]) == 3
    assert data["rows"][0]["model_id"] == "org/a-pass-clean"
    assert data["rows"][0]["device_label"] == "neuron (emulated)"
    r = client.get("/api/models", params={"task": "text-generation", "outcome": "failed"})
    assert {row["model_id"] for row in r.json()["rows"]} == {"org/c-fail-compile", "org/g-timeout"}
    r = client.get("/api/models", params={"stage": "compile", "status": "fail"})
    assert [row["model_id"] for row in r.json()["rows"]] == ["org/c-fail-compile"]
    r = client.get("/api/models", params={"model_type": "bert", "library": "transformers"})
    assert r.json()["total"] == 1
    r = client.get("/api/models", params={"search": "<script>"})
    assert [row["model_id"] for row in r.json()["rows"]] == [EVIL_ID]
    r = client.get("/api/models", params={"architecture": "LlamaForCausalLM"})
    assert {row["model_id"] for row in r.json()["rows"]} == {
        "org/a-pass-clean",
        "org/b-pass-fallback",
    }
    r = client.get("/api/models", params={"signature": "TimeoutError: stage exceeded N s"})
    assert [row["model_id"] for row in r.json()["rows"]] == ["org/g-timeout"]
    r = client.get("/api/models", params={"sort": "model_id", "order": "asc", "per_page": 1})
    assert r.json()["rows"][0]["model_id"] == "bert-x"


@pytest.mark.parametrize(
    "params",
    [
        {"page": "abc"},
        {"page": "0"},
        {"per_page": "100000"},
        {"sort": "downloads; drop table model_runs"},
        {"order": "up"},
        {"outcome": "maybe"},
        {"stage": "lunch"},
        {"status": "<script>"},
        {"search": "x" * 500},
    ],
)
def test_models_bad_params_400(client: TestClient, params: dict) -> None:
    r = client.get("/api/models", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["status"] == 400 and r.json()["error"]
    r = client.get("/models", params=params)
    assert r.status_code == 400
    no_live_script(r.text)


def test_models_html_table_and_pages(client: TestClient) -> None:
    r = client.get("/models", params={"per_page": 3})
    html = r.text
    assert r.status_code == 200 and "8 models match" in html
    assert "page 1 of 3" in html and 'rel="next"' in html
    assert 'href="/models/org/a-pass-clean?run=r2"' in html
    # the banner says "emulated" once; no row spends width on a badge
    assert 'data-emulated="true"' in html and "badge-emulated" not in html
    r = client.get("/models", params={"search": "script"})
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    no_live_script(r.text)
    assert "/models/evil/%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in r.text


def test_model_page_and_api(client: TestClient) -> None:
    r = client.get("/models/org/b-pass-fallback")
    assert r.status_code == 200
    html = r.text
    assert "org/b-pass-fallback" in html and "neuron (emulated)" in html
    assert 'data-emulated="true"' in html
    assert "aten::histc" in html and "4096" in html and "hidden_size" in html
    assert "hfsweep check org/b-pass-fallback --device neuron" in html
    assert "2.13.1" in html  # versions
    data = client.get("/api/models/org/b-pass-fallback").json()
    assert data["run_id"] == "r2" and len(data["stages"]) == 5
    assert [h["run_id"] for h in data["history"]] == ["r2", "r1"]
    old = client.get("/api/models/org/b-pass-fallback", params={"run": "r1"}).json()
    assert old["summary"]["outcome"] == "failed"


def test_model_without_org(client: TestClient) -> None:
    r = client.get("/api/models/bert-x")
    assert r.status_code == 200 and r.json()["summary"]["outcome"] == "passed"
    assert client.get("/models/bert-x").status_code == 200
    assert model_url("bert-x") == "/models/bert-x"


def test_unknown_model_404(client: TestClient) -> None:
    r = client.get("/api/models/nobody/nothing")
    assert r.status_code == 404 and "nobody/nothing" in r.json()["error"]
    r = client.get("/models/nobody/nothing")
    assert r.status_code == 404 and "no results for model" in r.text
    r = client.get("/api/models/org/old", params={"run": "r2"})
    assert r.status_code == 404


def test_a_model_page_finds_the_id_meant(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The id in another case is its page; a near id is a 404 that suggests the stored one; a
    catalog model with no results says its rank and the `hfsweep run --models` command that adds
    it to the store, in the page and in the JSON."""
    from reports.model_search import CatalogModel

    root = tmp_path_factory.mktemp("meant") / "store"
    build_hand_store(root)
    catalog = [CatalogModel("org/a-pass-clean", 1, 1000), CatalogModel("meta/Llama-9B", 7, 70)]
    c = TestClient(create_app(str(root), refresh_s=0, warm=False, catalog=catalog))
    page = c.get("/api/models/ORG/C-Fail-Compile")
    assert page.status_code == 200 and page.json()["model_id"] == "org/c-fail-compile"
    r = c.get("/api/models/org/c-fail")
    body = r.json()
    assert r.status_code == 404 and body["in_catalog"] is None
    assert body["did_you_mean"][0] == {
        "model_id": "org/c-fail-compile",
        "where": "store",
        "rank": None,
    }
    assert body["check"] is None  # neither stored nor in the catalog: nothing to run
    assert body["hint"] == "check the id's spelling (did you mean one of these?)"
    html = c.get("/models/org/c-fail").text
    assert '<a href="/models/org/c-fail-compile">org/c-fail-compile</a> (has results)' in html
    r = c.get("/api/models/meta/Llama-9B")
    body = r.json()
    assert r.status_code == 404
    assert body["in_catalog"] == {"model_id": "meta/Llama-9B", "rank": 7, "downloads": 70}
    assert body["error"].startswith("meta/Llama-9B is in the catalog (rank 7")
    run = f"hfsweep run --models meta/Llama-9B --device neuron --store {root}"
    assert body["hint"] == f"run it with: {run}"
    html = c.get("/models/meta/Llama-9B").text
    assert f"{run}</code>" in html
    # the models table's search for it answers as lookup does: its rank and the command
    table = c.get("/api/models", params={"search": "meta/Llama-9B"}).json()
    assert table["total"] == 0 and table["answer"]["check"] == run
    assert table["answer"]["message"].startswith("meta/Llama-9B is in the catalog (rank 7")
    html = c.get("/models", params={"search": "meta/Llama-9B"}).text
    assert 'id="search-answer"' in html and f"{run}</code>" in html
    assert c.get("/api/models", params={"search": "zzz qq"}).json()["answer"] is None
    assert c.get("/models/meta/Llama").status_code == 404
    assert "meta/Llama-9B (catalog rank 7)" in c.get("/models/meta/Llama").text


def test_hostile_model_id_and_message(client: TestClient) -> None:
    url = "/models/evil/" + quote("<script>alert(1)</script>", safe="")
    r = client.get(url)
    assert r.status_code == 200
    no_live_script(r.text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    assert (
        "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;"
        in r.text
    )
    data = client.get("/api" + url).json()
    assert data["model_id"] == EVIL_ID
    assert data["stages"][0]["error_message"] == EVIL_MESSAGE
    r = client.get("/models/" + quote("<img src=x onerror=alert(1)>", safe=""))
    assert r.status_code == 404
    assert "<img" not in r.text and "&lt;img src=x onerror=alert(1)&gt;" in r.text


def test_ops_page_and_api(client: TestClient) -> None:
    data = client.get("/api/ops").json()
    assert [o["op"] for o in data["ops"]] == ["aten::histc", "aten::nonzero"]
    assert data["ops"][0]["sole_downloads"] == 500
    html = client.get("/ops").text
    assert "aten::histc" in html and "aten::orphan" not in html and "data-emulated" in html
    assert client.get("/api/ops", params={"limit": 1}).json()["ops"][0]["op"] == "aten::histc"
    assert client.get("/api/ops", params={"limit": 0}).status_code == 400
    assert client.get("/api/ops", params={"limit": "x"}).status_code == 400


def test_runs_and_diff(client: TestClient) -> None:
    data = client.get("/api/runs").json()
    assert [r["run_id"] for r in data["runs"]] == ["r2", "r1"]
    assert data["runs"][0]["device_label"] == "neuron (emulated)"
    assert data["diff"]["run_a"] == "r1" and data["diff"]["run_b"] == "r2"
    d = client.get("/api/diff", params={"a": "r1", "b": "r2"}).json()
    assert d["summary"]["newly_failing"]["models"] == 1
    assert d["summary"]["newly_passing"]["models"] == 1
    html = client.get("/runs", params={"a": "r1", "b": "r2"}).text
    assert "newly_failing" in html and "org/c-fail-compile" in html and "torch_version" in html
    assert "r1 (neuron (emulated))" in html
    no_live_script(html)
    assert client.get("/runs", params={"a": "r1"}).status_code == 400
    assert client.get("/api/diff", params={"a": "r1", "b": "zz"}).status_code == 404
    assert client.get("/api/diff", params={"a": "r1"}).status_code == 400
    assert client.get("/api/runs", params={"limit": -1}).status_code == 400


def test_assets_and_misc(client: TestClient) -> None:
    r = client.get("/style.css")
    assert r.status_code == 200 and "text/css" in r.headers["content-type"]
    assert client.get("/api/health").json()["runs"] == 2
    assert "/api/models/{org}/{name}?run=" in client.get("/api").json()["endpoints"]
    r = client.get("/no/such/page/at/all")
    assert r.status_code == 404
    assert client.get("/api/nothing").json()["status"] == 404


def test_empty_store(tmp_path) -> None:
    c = TestClient(create_app(str(tmp_path / "empty"), refresh_s=0, warm=False))
    r = c.get("/")
    assert r.status_code == 404 and "no results yet" in r.text
    assert c.get("/api/models").status_code == 404
    assert c.get("/api/models/org/x").status_code == 404
    assert c.get("/api/runs").json() == {"runs": [], "diff": None}


def test_models_table_reads_at_a_glance(client: TestClient) -> None:
    html = client.get("/models", params={"per_page": 50}).text
    # an id breaks only after its "/": each segment is kept whole
    assert '<span class="id-seg">org/</span><wbr><span class="id-seg">c-fail-compile</span>' in html
    # the failure's op, linked to its page, with the full error as the cell's tooltip
    assert 'title="RuntimeError: boom in aten::nonzero"' in html
    assert '<a class="op" href="/ops/aten%3A%3Anonzero?run=r2">aten::nonzero</a>' in html
    # an error naming no op shows its own text (escaped, in the cell and in the tooltip)
    assert "TimeoutError: stage exceeded 300 s" in html
    assert (
        'title="ValueError: &lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt; &amp; '
        '&lt;b&gt;bold&lt;/b&gt;"' in html
    )
    no_live_script(html)
    # a stage that does not apply says so; a skipped model says why in the same column
    bert = html[html.index("bert-x</span>") :]
    assert (
        '<td class="l st na" title="generate: does not apply to this model">n/a</td>' in bert[:2000]
    )
    assert '<span class="reason">remote_code</span>' in html
    assert "signature" not in html.split('id="models"')[1]  # signatures group; people read errors


def test_model_page_links_ops_the_hub_and_the_cluster(client: TestClient) -> None:
    html = client.get("/models/org/c-fail-compile").text
    assert 'href="https://huggingface.co/org/c-fail-compile"' in html
    assert '<a href="/ops/aten%3A%3Anonzero?run=r2">aten::nonzero</a>' in html  # failing op
    assert '<a href="/ops/aten%3A%3Ahistc?run=r2">aten::histc</a>' in html  # a fallback
    assert 'href="/models?run=r2&amp;signature=RuntimeError%3A+boom"' in html
    assert "boom in aten::nonzero" in html and "signature:" not in html
    # no wall time in this store's rows: the stages' own seconds alone, in the words lookup
    # and check use
    cell = html.split('id="wall-time">', 1)[1].split("</td>", 1)[0]
    assert cell.startswith("stages ") and "model process" not in cell
    evil = client.get("/models/evil/" + quote("<script>alert(1)</script>", safe="")).text
    assert "huggingface.co" not in evil  # not a Hub id: no link made of it
    no_live_script(evil)


def test_model_page_says_a_default_config_is_not_the_repos(tmp_path) -> None:
    from reports.store import Store
    from tests.report_store_builder import rows_for

    store = Store(tmp_path / "s")
    res, fb = rows_for("r1", "org/a-pass-clean", ["pass"] * 5)
    for r in res:
        r.update(config_source="transformers_default", wall_s=7.25, peak_host_memory_bytes=3 << 29)
    write_model_rows(store, "r1", res, fb, [])
    c = TestClient(create_app(str(tmp_path / "s"), refresh_s=0, warm=False))
    html = c.get("/models/org/a-pass-clean").text
    assert "transformers_default (a library's default config for the architecture, not the " in html
    assert "<h2>Config: library default vs shrunk</h2>" in html
    assert "model process 7.25 s (wall: set-up, stages, exit)" in html and "host 1.50 GiB" in html
    rows = c.get("/api/models").json()["rows"]
    assert rows[0]["wall_s"] == 7.25


def test_overview_charts_label_failures_by_op_and_generate_by_its_models(
    client: TestClient,
) -> None:
    html = client.get("/").text
    chart = html[html.index("Failures by the op they name") :]
    assert ">aten::nonzero</text>" in chart and ">TimeoutError (no op named)</text>" in chart
    funnel = html[html.index("Funnel: models that passed each stage") :]
    # generate applies to 7 of the 8 models (not to the encoder bert-x): 2 of 7 passed
    assert "generate: 28.6%" in funnel


def test_an_interrupted_run_is_listed_and_diffable(tmp_path) -> None:
    import datetime as dt

    from reports.store import Store

    root = tmp_path / "s"
    build_hand_store(root)
    t = dt.datetime(2026, 11, 3, 2, 0, tzinfo=dt.UTC)
    Store(root).write(
        "runs",
        "r3",
        [
            {
                "run_id": "r3",
                "status": "interrupted",
                "started_at": t,
                "updated_at": t,
                "device": "neuron",
                "device_emulated": True,
            }
        ],  # fmt: skip
    )
    c = TestClient(create_app(str(root), refresh_s=0, warm=False))
    runs = c.get("/api/runs").json()["runs"]
    r3 = next(r for r in runs if r["run_id"] == "r3")
    assert r3["status"] == "interrupted" and r3["models"] == 0 and r3["has_results"] is False
    html = c.get("/runs").text
    assert 'r3 <span class="muted">(no results yet)</span>' in html and "interrupted" in html
    d = c.get("/api/diff", params={"a": "r2", "b": "r3"}).json()
    assert d["summary"]["removed"]["models"] == 8 and d["device_b"] == "neuron (emulated)"
    assert c.get("/runs", params={"a": "r3", "b": "r2"}).status_code == 200
    assert c.get("/api/diff", params={"a": "r2", "b": "r4"}).status_code == 404


def test_op_page_lists_the_models_failing_at_it_and_how_to_reproduce(client: TestClient) -> None:
    data = client.get("/api/ops/aten::nonzero").json()
    assert [m["model_id"] for m in data["failing"]] == ["org/c-fail-compile"]
    assert data["reproduce"] == ["hfsweep check org/c-fail-compile --device neuron"]
    html = client.get("/ops/aten%3A%3Anonzero").text
    assert 'href="/models/org/c-fail-compile?run=r2"' in html
    assert "RuntimeError: boom in aten::nonzero" in html
