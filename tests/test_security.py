"""Security: remote code can never be turned on by data; the dashboard escapes every string it
renders, refuses climbing ids, sends user input to DuckDB only as parameters, and listens on
127.0.0.1 unless told otherwise. (The Hub client's "configs only": tests/test_hub_client.py.)"""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
import sys
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from dashboard.app import create_app
from ground.errors import ConfigError
from ground.schema import FALLBACKS_SCHEMA, RESULTS_SCHEMA, RUNS_SCHEMA
from model_configs.catalog import load_catalog
from model_configs.resolve import resolve_local
from model_configs.spec import CatalogEntry
from reports.store import Store
from runners.settings import ModelSettings
from sweep.plan import plan_entry
from tests.conftest import ROOT, write_catalog
from tests.store_writes import write_model_rows

PACKAGES = (
    "sweep",
    "model_configs",
    "runners",
    "sizing",
    "reports",
    "dashboard",
    "ground",
    "bench",
)
STAGES = ["load", "forward"]

# ---- remote code -----------------------------------------------------------------------------


def _python_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_no_code_can_turn_remote_code_on():
    """Every `trust_remote_code=` in the code is the literal False; nothing imports the
    libraries' loaders of repo code or passes a custom pipeline."""
    offences = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "trust_remote_code" and not (
                        isinstance(kw.value, ast.Constant) and kw.value.value is False
                    ):
                        offences.append(f"{where}: trust_remote_code={ast.unparse(kw.value)}")
                    if kw.arg in ("custom_pipeline", "custom_revision", "code_revision"):
                        offences.append(f"{where}: {kw.arg}=")
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            for name in names:
                if "dynamic_module" in name or name in ("get_class_from_dynamic_module",):
                    offences.append(f"{where}: {name}")
    assert offences == []


@pytest.fixture
def remote_code_tripwire(monkeypatch) -> list[str]:
    """Every binding of transformers' and diffusers' loaders of repo code raises and is logged."""
    import diffusers.utils.dynamic_modules_utils as ddm
    import transformers.dynamic_module_utils as tdm

    loaders = {}
    for mod in (tdm, ddm):
        for name in (
            "get_class_from_dynamic_module",
            "get_cached_module_file",
            "get_class_in_module",
        ):
            if hasattr(mod, name):
                loaders[id(getattr(mod, name))] = name
    calls: list[str] = []

    def tripwire(name: str):
        def refuse(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"repo code loader {name} was called")

        return refuse

    patched = 0
    for mod in list(sys.modules.values()):
        namespace = getattr(mod, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            if id(value) in loaders and callable(value):
                monkeypatch.setattr(mod, attr, tripwire(loaders[id(value)]))
                patched += 1
    assert len(loaders) >= 4 and patched >= len(loaders)  # the auto classes' copies too
    return calls


def _local(tmp_path: Path, name: str, config: dict[str, Any], **files: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    filename = "model_index.json" if "_class_name" in config else "config.json"
    (folder / filename).write_text(json.dumps(config))
    for rel, body in files.items():
        target = folder / rel.replace("__", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body if isinstance(body, str) else json.dumps(body))
    return folder


def _plan_local(folder: Path):
    """What `hfsweep check FOLDER` plans (a refusal while reading the config is a skip)."""
    from runners.outcome import skipped
    from sweep.plan import Planned

    try:
        resolved = resolve_local(folder)
    except ConfigError as exc:
        entry = CatalogEntry(model_id=str(folder))
        return Planned(entry=entry, outcome=skipped(STAGES, exc.reason, exc.message))
    entry = CatalogEntry(
        model_id=str(folder),
        library=resolved.library,
        architectures_hint=tuple(resolved.config.get("architectures") or ()),
    )
    return plan_entry(entry, STAGES, resolved=resolved)


def _skip_reason(planned) -> str | None:
    return planned.outcome.stages[0].reason if planned.outcome is not None else None


REPO_CODE = "raise SystemExit('repo code ran')"


def test_configs_asking_for_remote_code_never_get_it(tmp_path, remote_code_tripwire):
    import transformers

    from runners.run_model import run_model

    # a known model type whose config asks for repo code: built from the library's own class
    folder = _local(
        tmp_path,
        "asks",
        {
            "model_type": "bert",
            "architectures": ["BertModel"],
            "auto_map": {"AutoModel": "modeling_evil.EvilModel", "AutoConfig": "cfg.EvilConfig"},
            "trust_remote_code": True,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 128,
        },
        **{"modeling_evil.py": REPO_CODE, "cfg.py": REPO_CODE},
    )
    planned = _plan_local(folder)
    assert planned.outcome is None and planned.spec is not None
    assert hasattr(transformers, planned.spec.architecture)
    outcome = run_model(planned.spec, ModelSettings(device="cpu", stages=STAGES))
    assert [s.status for s in outcome.stages] == ["pass", "pass"], outcome.stages
    # a custom class name with a known type: still the library's class
    folder = _local(
        tmp_path,
        "custom-arch",
        {
            "model_type": "llama",
            "architectures": ["EvilForCausalLM"],
            "auto_map": {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"},
        },
        **{"modeling_evil.py": REPO_CODE},
    )
    planned = _plan_local(folder)
    assert planned.spec is None or hasattr(transformers, planned.spec.architecture)
    # an unknown type that maps to repo code: a remote_code skip
    folder = _local(
        tmp_path,
        "unknown",
        {"model_type": "evil", "auto_map": {"AutoModel": "modeling_evil.EvilModel"}},
        **{"modeling_evil.py": REPO_CODE},
    )
    assert _skip_reason(_plan_local(folder)) == "remote_code"
    assert remote_code_tripwire == []
    # the tripwire itself works: what this tool never does trips it before any repo code runs
    with pytest.raises(AssertionError, match="repo code loader"):
        transformers.AutoConfig.from_pretrained(str(tmp_path / "asks"), trust_remote_code=True)
    assert remote_code_tripwire


def test_pipelines_whose_models_are_repo_code_are_skips(tmp_path, remote_code_tripwire):
    custom_unet = {
        "_class_name": "StableDiffusionPipeline",
        "unet": ["my_unet", "MyUNet"],
        "scheduler": ["diffusers", "PNDMScheduler"],
    }
    folder = _local(tmp_path, "custom-unet", custom_unet, **{"my_unet.py": REPO_CODE})
    assert _skip_reason(_plan_local(folder)) == "remote_code"
    custom_pipeline = {"_class_name": ["pipeline_evil", "EvilPipeline"], "unet": ["x", "Y"]}
    folder = _local(tmp_path, "custom-pipe", custom_pipeline)
    assert _skip_reason(_plan_local(folder)) == "remote_code"
    # a custom side component does not run: the pipeline's diffusers denoiser does
    mixed = {
        "_class_name": "StableDiffusionPipeline",
        "unet": ["diffusers", "UNet2DConditionModel"],
        "image_encoder": ["evil_encoder", "EvilEncoder"],
    }
    folder = _local(tmp_path, "mixed", mixed, **{"evil_encoder.py": REPO_CODE})
    planned = _plan_local(folder)
    assert planned.spec is not None and planned.spec.architecture == "UNet2DConditionModel"
    assert remote_code_tripwire == []


def test_catalog_data_can_only_add_the_refusal(tmp_path):
    path = write_catalog(
        tmp_path / "c.csv",
        [
            {"model_id": "a/flag", "library_name": "transformers", "custom_code": "yes"},
            {"model_id": "a/tag", "library_name": "transformers", "tags": "custom_code|bert"},
        ],
    )
    text = path.read_text().replace("custom_code,", "custom_code,trust_remote_code,", 1)
    lines = text.splitlines()
    lines[1:] = [re.sub(r",(True|False),", r",\1,true,", line, count=1) for line in lines[1:]]
    path.write_text("\n".join(lines) + "\n")  # a `trust_remote_code=true` column is ignored
    catalog = load_catalog(str(path))
    for entry in catalog.entries:
        assert entry.custom_code, entry
        planned = plan_entry(entry, STAGES, config_dir=catalog.config_dir)
        assert _skip_reason(planned) == "remote_code"
    bundled = load_catalog("bundled")
    assert all(e.custom_code for e in bundled.entries if "custom_code" in e.tags)


def test_the_command_line_has_no_way_to_turn_it_on():
    from sweep.cli import COMMANDS

    for module, _help in COMMANDS.values():
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert "remote-code" not in source and "remote_code" not in source.replace(
            "SkipReason.REMOTE_CODE", ""
        ), module


# ---- the dashboard: a store whose every string is markup --------------------------------------

RUNS = ("r1", "r2")


def evil(column: str) -> str:
    return f"<x-evil-{column} onmouseover=alert(1)>'\"&"


# values that must stay in their vocabularies for the pages to mean anything
KEEP = {"run_id", "stage", "status", "model_id", "reason", "source", "stages"}


def _value(name: str, type_: pa.DataType) -> Any:
    """A value of the column's type: every string in it hostile, nested ones too."""
    if pa.types.is_string(type_):
        return evil(name)
    if pa.types.is_boolean(type_):
        return True
    if pa.types.is_timestamp(type_):
        return dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    if pa.types.is_floating(type_):
        return 1.5
    if pa.types.is_list(type_):
        return [_value(name, type_.value_type)]
    if pa.types.is_struct(type_):
        return {f.name: _value(f"{name}.{f.name}", f.type) for f in type_}
    return 3


def _row(schema, run_id: str, **values: Any) -> dict[str, Any]:
    row = {f.name: values[f.name] if f.name in values else _value(f.name, f.type) for f in schema}
    row["run_id"] = run_id
    return row


HOSTILE_MODELS = {
    "<x-evil-org>/<x-evil-name onmouseover=alert(1)>": ("fail", "none"),
    "org/<x-evil-skip>": ("skip", "<x-evil-reason>"),
    "org/plain": ("pass", None),
}


def build_hostile_store(root: Path) -> None:
    store = Store(str(root))
    for run_id in RUNS:
        results, fallbacks = [], []
        for model_id, (status, reason) in HOSTILE_MODELS.items():
            for stage in ("load", "forward", "backward", "compile", "generate"):
                st = status if stage == "load" or status == "skip" else "not_run"
                if status == "pass":
                    st = "pass"
                results.append(
                    _row(
                        RESULTS_SCHEMA,
                        run_id,
                        model_id=model_id,
                        stage=stage,
                        status=st,
                        reason=reason if st == "skip" else None,
                        shrink_changes=json.dumps({evil("key"): [evil("was"), evil("now")]}),
                        shrunk_config=json.dumps({evil("cfgkey"): evil("cfgvalue")}),
                    )
                )
                fallbacks.append(
                    _row(FALLBACKS_SCHEMA, run_id, model_id=model_id, stage=stage, source="eager")
                )
        write_model_rows(store, run_id, results, fallbacks)
        store.write("runs", run_id, [_row(RUNS_SCHEMA, run_id, status="finished")])


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[TestClient, Path]:
    root = tmp_path_factory.mktemp("hostile") / "store"
    build_hostile_store(root)
    return TestClient(create_app(str(root), refresh_s=0, warm=False)), root


LIVE_MARKUP = re.compile(r"<x-evil", re.IGNORECASE)


def _links(page: str, base: str) -> list[str]:
    out = []
    for href in re.findall(r'href="([^"]+)"', page):
        url = urljoin(base, href.replace("&amp;", "&"))
        parts = urlsplit(url)
        if not parts.netloc or parts.netloc == "testserver":
            out.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return out


def test_every_page_escapes_every_string(hostile):
    """Crawl every page reachable from the overview (and error pages fed markup): every string
    of the store is markup, and none of it may reach a page alive."""
    client, _ = hostile
    seeds = [
        "/",
        "/models",
        "/ops",
        "/runs",
        "/runs?a=r1&b=r2",
        "/models?search=" + quote("<x-evil-search>"),
        "/models?library=" + quote(evil("library")),
        "/models?sort=" + quote("<x-evil-sort>"),
        "/models/" + quote("<x-evil-404>", safe=""),
        "/ops?run=" + quote("<x-evil-run>"),
        "/no/such/" + quote("<x-evil-path>"),
    ]
    queue, seen, pages = deque(seeds), set(), 0
    while queue and pages < 120:
        url = queue.popleft()
        if url in seen or url.startswith(("/static", "/style.css", "/api")):
            continue
        seen.add(url)
        r = client.get(url)
        pages += 1
        assert r.status_code < 500, url
        if "text/html" not in r.headers.get("content-type", ""):
            continue
        found = LIVE_MARKUP.search(r.text)
        assert found is None, (url, r.text[max(0, found.start() - 200) : found.end() + 80])
        queue.extend(_links(r.text, "http://testserver" + url))
    model_pages = [u for u in seen if u.startswith("/models/")]
    assert pages >= 10 and len(model_pages) >= 3, sorted(seen)
    # the markup is there, as text
    page = client.get("/models/org/" + quote("<x-evil-skip>", safe="")).text
    assert "&lt;x-evil-error_message" in page or "&lt;x-evil-reason&gt;" in page


def test_the_static_report_escapes_every_string(hostile, tmp_path):
    from reports.query import StoreQuery
    from reports.render import html_site

    _, root = hostile
    from reports.summary import run_report

    q = StoreQuery(str(root))
    written = html_site.write_site(q, run_report(q, "r2"), tmp_path / "site")
    assert written
    for path in written:
        if path.suffix == ".html":
            text = path.read_text()
            assert LIVE_MARKUP.search(text) is None, path
            assert "&lt;x-evil" in text


@pytest.mark.parametrize(
    "url",
    [
        "/models/..%2F..%2Fetc%2Fpasswd",
        "/models/org/..%2F..%2Fsecret",
        "/api/models/%2E%2E/x",
        "/api/models/org/%2E",
        "/models/a%5Cb",
        "/api/models/a/b%00c",
        "/api/models/a/b%09c",
        "/api/models/" + "a" * 400,
    ],
)
def test_climbing_or_control_ids_are_refused(hostile, url):
    client, _ = hostile
    r = client.get(url)
    assert r.status_code == 400, (url, r.status_code)
    assert "bad model id" in r.text


def test_an_id_with_a_newline_matches_no_route(hostile):
    client, _ = hostile
    assert client.get("/api/models/a/b%0Ac").status_code == 404


def test_static_files_stay_in_their_folder(hostile):
    client, _ = hostile
    for url in ("/static/..%2F..%2F..%2Fetc%2Fpasswd", "/static/../../app.py", "/style.css/../x"):
        r = client.get(url)
        assert r.status_code in (400, 404), url
        assert "root:" not in r.text and "def create_app" not in r.text


# ---- parameterised queries only ---------------------------------------------------------------

MARK = "Zq9'\"; DROP TABLE model_runs; --"


class _RecordingCursor:
    def __init__(self, inner: Any, log: list[str]):
        self._inner, self._log = inner, log

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self._log.append(sql)
        self._inner.execute(sql, *args, **kwargs)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _RecordingConnection(_RecordingCursor):
    def cursor(self) -> _RecordingCursor:
        return _RecordingCursor(self._inner.cursor(), self._log)


def test_user_input_reaches_duckdb_only_as_parameters(tmp_path):
    """Send a marker in every parameter and path of the API, record every SQL text DuckDB is
    given: the marker is never part of one (it travels as a bound parameter or is refused)."""
    root = tmp_path / "store"
    build_hostile_store(root)
    app = create_app(str(root), refresh_s=0, warm=False)
    q = app.state.query
    log: list[str] = []
    q._con = _RecordingConnection(q._con, log)
    client = TestClient(app)
    m = quote(MARK, safe="")
    urls = [
        f"/api/models?search={m}",
        f"/api/models?library={m}&task={m}&model_type={m}&architecture={m}&signature={m}",
        f"/api/models?outcome={m}",
        f"/api/models?stage={m}",
        f"/api/models?status={m}",
        f"/api/models?sort={m}",
        f"/api/models?order={m}",
        f"/api/models?run={m}",
        f"/api/models/{m}/{m}",
        f"/api/models/{m}",
        f"/models?search={m}&library={m}",
        f"/api/ops?run={m}",
        f"/api/overview?run={m}",
        f"/api/runs?a={m}&b={m}",
        f"/api/diff?a=r1&b={m}",
    ]
    for url in urls:
        assert client.get(url).status_code < 500, url
    assert log, "no SQL was recorded: the recorder is not in the query path"
    leaked = [sql for sql in log if "Zq9" in sql]
    assert leaked == []
    # and the store's summary is intact
    assert client.get("/api/models").json()["total"] == len(HOSTILE_MODELS)


# ---- where the dashboard listens ---------------------------------------------------------------


def _dashboard_args(*argv: str):
    import argparse

    from sweep.commands import dashboard

    parser = argparse.ArgumentParser()
    dashboard.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_dashboard_listens_on_loopback_unless_told(monkeypatch, capsys, tmp_path):
    import uvicorn

    from sweep.commands import dashboard
    from tests.browser_support import free_port

    served: list[str] = []

    def serve(server, sockets=None):  # the server is given the socket the command bound
        served.append(sockets[0].getsockname()[0])
        sockets[0].close()

    monkeypatch.setattr(uvicorn.Server, "run", serve)
    (tmp_path / "s").mkdir()
    port = str(free_port())
    assert dashboard.run(_dashboard_args("--store", str(tmp_path / "s"), "--port", port)) == 0
    assert served == ["127.0.0.1"]
    assert "warning" not in capsys.readouterr().err
    dashboard.run(
        _dashboard_args("--store", str(tmp_path / "s"), "--host", "0.0.0.0", "--port", port)
    )
    assert served[-1] == "0.0.0.0"
    assert "warning: listening on 0.0.0.0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "host, loopback",
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.4", False), ("example.org", False)],
)  # fmt: skip
def test_loopback_hosts(host, loopback):
    from sweep.commands.dashboard import is_loopback

    assert is_loopback(host) is loopback
