"""The Hub client against a Hub served on 127.0.0.1 by the test (real HTTP, no network):
timeouts, 429 with Retry-After, 5xx, malformed JSON, a repo that disappears between listing and
fetching, a gated repo; config-only snapshots (never weights, never code); provenance per
diffusers component; and `hfsweep catalog refresh` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path

import pytest

from ground.errors import HubError
from ground.schema import Stage, Status
from model_configs.catalog import load_catalog
from model_configs.catalog_refresh import refresh_catalog
from model_configs.hub import (
    RECORD_NAME,
    HubClient,
    RetryPolicy,
    _retry_after,
    classify,
    is_config_file,
    model_folder,
)
from model_configs.resolve import resolve_entry
from model_configs.spec import CatalogEntry
from sweep.plan import plan_entry
from tests.conftest import FIXTURES, HFSWEEP, ROOT
from tests.fake_hub import FakeHub

STAGES = [Stage.LOAD, Stage.FORWARD]
NOT_CONFIG = (
    ".safetensors",
    ".bin",
    ".py",
    ".pt",
    ".onnx",
    ".gguf",
    ".h5",
    ".msgpack",
    "tokenizer",
)

BERT = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 64}
UNET = {
    "_class_name": "UNet2DConditionModel",
    "block_out_channels": [320, 640, 1280, 1280],
    "cross_attention_dim": 768,
    "sample_size": 64,
}
PIPELINE = {
    "_class_name": "StableDiffusionPipeline",
    "unet": ["diffusers", "UNet2DConditionModel"],
    "vae": ["diffusers", "AutoencoderKL"],
    "scheduler": ["diffusers", "PNDMScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
}


@pytest.fixture
def hub(monkeypatch):
    """A fake Hub; huggingface_hub online for the test, its own retry sleeps recorded."""
    import huggingface_hub
    import huggingface_hub.utils._http as hub_http

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    library_sleeps: list[float] = []
    fake_time = types.SimpleNamespace(sleep=library_sleeps.append)
    monkeypatch.setattr(hub_http, "time", fake_time)
    with FakeHub(page_size=2) as server:
        server.library_sleeps = library_sleeps  # type: ignore[attr-defined]
        yield server
    huggingface_hub.set_client_factory(hub_http.default_client_factory)


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make_client(hub, tmp_path, sleeps, timeout_s: float) -> HubClient:
    return HubClient(
        endpoint=hub.url,
        cache_dir=tmp_path / "hub-cache",
        timeout_s=timeout_s,
        retry=RetryPolicy(attempts=3, base_s=2.0, max_s=30.0, sleep=sleeps.append),
    )


@pytest.fixture
def client(hub, tmp_path, sleeps) -> HubClient:
    """A client whose timeout no answer of the local fake Hub comes near, however loaded the
    machine: a retry it records is the fault a test asked for, never a slow answer."""
    return make_client(hub, tmp_path, sleeps, timeout_s=120.0)


@pytest.fixture
def impatient_client(hub, tmp_path, sleeps) -> HubClient:
    """A client that gives up on a request after 5 s: what cuts a stalled Hub (whose stalled
    answer never comes before the test ends)."""
    return make_client(hub, tmp_path, sleeps, timeout_s=5.0)


def add_models(hub: FakeHub) -> None:
    """A transformers repo, a diffusers pipeline, both with weights, code and tokenizers."""
    hub.add(
        "acme/bert",
        {
            "config.json": BERT,
            "model.safetensors": b"\0" * 64,
            "pytorch_model.bin": b"\0" * 64,
            "modeling_acme.py": "raise SystemExit('remote code ran')",
            "tokenizer.json": {"version": "1.0"},
            "onnx/model.onnx": b"\0",
        },
        downloads=1000,
        library_name="transformers",
        tags=["transformers", "bert", "license:mit"],
    )
    hub.add(
        "acme/pipe",
        {
            "model_index.json": PIPELINE,
            "unet/config.json": UNET,
            "unet/diffusion_pytorch_model.safetensors": b"\0" * 64,
            "vae/config.json": {"_class_name": "AutoencoderKL"},
            "vae/diffusion_pytorch_model.bin": b"\0",
            "scheduler/scheduler_config.json": {"_class_name": "PNDMScheduler"},
            "text_encoder/config.json": {"model_type": "clip_text_model"},
            "text_encoder/model.safetensors": b"\0",
            "tokenizer/vocab.json": {"a": 1},
            "pipeline_custom.py": "raise SystemExit('remote code ran')",
        },
        downloads=500,
        library_name="diffusers",
        tags=["diffusers", "diffusers:StableDiffusionPipeline"],
    )


def resolve_requests(hub: FakeHub) -> list[str]:
    """Paths of every file the client asked the Hub for (HEAD or GET)."""
    return [r.split("/resolve/", 1)[1].split("/", 1)[1] for r in hub.requests if "/resolve/" in r]


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# ---- config-only snapshots -------------------------------------------------------------------


def test_refresh_caches_every_pipeline_config_and_never_weights_or_code(hub, client, tmp_path):
    add_models(hub)
    out = tmp_path / "cat.csv"
    catalog = refresh_catalog(5, out, client=client)
    assert [e.model_id for e in catalog.entries] == ["acme/bert", "acme/pipe"]
    config_dir = out.with_suffix("")
    assert files_under(config_dir) == [
        f"acme/bert/{RECORD_NAME}",
        "acme/bert/config.json",
        f"acme/pipe/{RECORD_NAME}",
        "acme/pipe/model_index.json",
        "acme/pipe/scheduler/scheduler_config.json",
        "acme/pipe/text_encoder/config.json",
        "acme/pipe/unet/config.json",
        "acme/pipe/vae/config.json",
    ]
    asked = resolve_requests(hub)
    assert asked and all(is_config_file(p) for p in asked), asked
    assert not [p for p in asked if any(bad in p for bad in NOT_CONFIG)]
    # nothing but configs in huggingface_hub's cache either (blobs are named by hash: check sizes)
    snapshots = [p for p in (tmp_path / "hub-cache").rglob("snapshots/*/**/*") if p.is_file()]
    assert snapshots and all(is_config_file(p.name) for p in snapshots)
    record = json.loads((config_dir / "acme/pipe" / RECORD_NAME).read_text())
    assert record["status"] == "fetched" and record["revision"] == hub.repos["acme/pipe"].sha
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["status"] == "finished" and meta["configs"] == {"fetched": 2}


def test_recorded_listing_responses(hub, client, tmp_path):
    """The recorded API responses (tests/fixtures/hub_list_models.json), served over HTTP."""
    recorded = json.loads((FIXTURES / "hub_list_models.json").read_text())
    for info in recorded["models"]:
        files = dict(recorded["files"].get(info["id"], {}))
        for sib in info.get("siblings", []):
            name = sib["rfilename"]  # weights and code exist too, and are never fetched
            files.setdefault(
                name, {"_class_name": "UNet2DConditionModel"} if is_config_file(name) else b"\0"
            )
        keys = ("downloads", "likes", "pipeline_tag", "library_name", "tags")
        hub.add(info["id"], files, **{k: info[k] for k in keys if k in info})
    out = tmp_path / "catalog.csv"
    catalog = refresh_catalog(3, out, client=client)
    first, remote, diffusion = catalog.entries
    assert first.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert first.model_type_hint == "bert" and first.library == "sentence-transformers"
    assert remote.custom_code is True and diffusion.library == "diffusers"
    assert [p for p in files_under(out.with_suffix("")) if not p.endswith(RECORD_NAME)] == [
        "acme/remote-model/config.json",
        "sentence-transformers/all-MiniLM-L6-v2/config.json",
        "stabilityai/sdxl-like/model_index.json",
        "stabilityai/sdxl-like/unet/config.json",
    ]
    assert all(is_config_file(p) for p in resolve_requests(hub))
    # remote code is refused from the catalog flag, whatever its config says
    planned = plan_entry(remote, STAGES, config_dir=catalog.config_dir)
    assert planned.outcome.stages[0].reason == "remote_code"


def test_hostile_tree_paths_are_never_requested(hub, client):
    hub.add(
        "acme/evil",
        {
            "config.json": BERT,
            "../../escape/config.json": {"x": 1},
            "sub/../../up/config.json": {"x": 1},
            "a/b/c/config.json": {"x": 1},
        },
    )
    fetch = client.fetch_configs("acme/evil", library="diffusers")
    assert fetch.status == "fetched" and fetch.files == ("config.json",)
    assert resolve_requests(hub) == ["config.json", "config.json"]  # HEAD, then GET


@pytest.mark.parametrize(
    "path, ok",
    [
        ("config.json", True),
        ("model_index.json", True),
        ("unet/config.json", True),
        ("scheduler/scheduler_config.json", True),
        ("model.safetensors", False),
        ("pytorch_model.bin", False),
        ("modeling_acme.py", False),
        ("config.json.py", False),
        ("config.py", False),
        ("tokenizer.json", False),
        ("unet/diffusion_pytorch_model.safetensors", False),
        ("a/b/config.json", False),
        ("../config.json", False),
        ("/etc/config.json", False),
        ("a\\config.json", False),
        ("./config.json", False),
        ("", False),
    ],
)
def test_only_config_files_pass(path, ok):
    assert is_config_file(path) is ok


@pytest.mark.parametrize("model_id", ["../../etc", "a/../../b", "/abs", "a\\b", "a/\x00b", "a//b"])
def test_model_ids_never_climb_out_of_the_config_folder(tmp_path, model_id):
    assert model_folder(tmp_path, model_id) is None
    entry = CatalogEntry(model_id=model_id, library="transformers", model_type_hint="bert")
    planned = plan_entry(entry, STAGES, config_dir=tmp_path)
    assert planned.outcome.stages[0].reason == "not_found"


# ---- retries ---------------------------------------------------------------------------------


def test_429_honours_retry_after(hub, client, sleeps):
    add_models(hub)
    hub.fault("/api/models/acme/bert/revision", times=2, status=429, headers={"Retry-After": "7"})
    fetch = client.fetch_configs("acme/bert")
    assert fetch.status == "fetched"
    assert sleeps == [7.0, 7.0]  # what the server asked, not the backoff's 2 s, 4 s
    assert len(hub.asked("/api/models/acme/bert/revision")) == 3


def test_retry_after_as_http_date_and_capped(monkeypatch):
    import datetime as dt
    import email.utils

    from model_configs import hub as hub_module

    now = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)

    class Frozen(dt.datetime):  # the client's clock, at a time the test decides
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return now

    monkeypatch.setattr(hub_module, "dt", types.SimpleNamespace(UTC=dt.UTC, datetime=Frozen))
    future = email.utils.format_datetime(now + dt.timedelta(seconds=30), usegmt=True)
    assert _retry_after(types.SimpleNamespace(headers={"Retry-After": future})) == 30.0
    assert _retry_after(types.SimpleNamespace(headers={})) is None
    assert RetryPolicy(max_s=60).delay(1, retry_after=3600) == 60
    assert [RetryPolicy(base_s=2, max_s=5).delay(n) for n in (1, 2, 3)] == [2, 4, 5]


def test_5xx_is_retried_with_backoff(hub, client, sleeps):
    add_models(hub)
    hub.fault("/api/models/acme/bert/revision", times=2, status=503)
    assert client.fetch_configs("acme/bert").status == "fetched"
    assert sleeps == [2.0, 4.0]


def test_5xx_that_persists_is_one_clear_error_never_a_model_row(hub, client, sleeps):
    add_models(hub)
    hub.fault("/api/models/acme/bert/revision", times=99, status=502)
    entry = CatalogEntry(model_id="acme/bert", library="transformers", model_type_hint="bert")
    with pytest.raises(HubError, match=r"kept failing .*HTTP 502; 3 tries") as info:
        plan_entry_online(entry, client)
    assert info.value.hint and "rerun" in info.value.hint
    assert sleeps == [2.0, 4.0]


def test_hub_errors_fall_back_to_the_snapshot_cached_earlier(hub, client, sleeps):
    """huggingface_hub serves a snapshot it already has when the Hub errors: the configs are the
    repo's, at the commit recorded with them."""
    add_models(hub)
    first = client.fetch_configs("acme/pipe", library="diffusers")
    hub.fault("/api/models/acme/pipe/", times=99, status=503)
    again = client.fetch_configs("acme/pipe", library="diffusers")
    assert (again.status, again.files, again.revision) == (
        "fetched",
        first.files,
        hub.repos["acme/pipe"].sha,
    )


def test_timeout_is_retried(hub, impatient_client, sleeps):
    """The repo-info call carries no timeout of huggingface_hub's own: a stalled Hub would hang
    the refresh. The client's timeout (5 s here) cuts it, and the retry gets the answer."""
    add_models(hub)
    hub.fault("GET /api/models/acme/bert/revision", times=1, stall_s=3600)
    assert impatient_client.fetch_configs("acme/bert").status == "fetched"
    assert len(sleeps) >= 1  # the stalled call timed out and was retried
    assert len(hub.asked("GET /api/models/acme/bert/revision")) == len(sleeps) + 1


def test_listing_timeouts_and_errors_are_retried(hub, impatient_client, sleeps):
    add_models(hub)
    hub.add("acme/third", {"config.json": BERT})
    hub.fault("cursor=2", times=1, stall_s=3600)  # the second page stalls once
    hub.fault("GET /api/models?", times=1, status=500)
    infos = impatient_client.list_models(10)
    assert [i.id for i in infos] == ["acme/bert", "acme/pipe", "acme/third"]
    assert hub.library_sleeps or sleeps  # huggingface_hub's own backoff or ours retried


def test_malformed_json_is_retried_then_one_error(hub, client, sleeps):
    add_models(hub)
    hub.add("acme/third", {"config.json": BERT})
    hub.fault("cursor=2", times=1, status=200, body=b"[{not json")  # the second page
    assert [i.id for i in client.list_models(10)] == ["acme/bert", "acme/pipe", "acme/third"]
    assert sleeps == [2.0]
    hub.fault("GET /api/models?", times=99, status=200, body=b'[{"no_id": 1}]')
    with pytest.raises(HubError, match="malformed"):
        client.list_models(10)
    hub.fault("/api/models/acme/pipe/revision", times=99, status=200, body=b"<html>proxy</html>")
    with pytest.raises(HubError, match="malformed"):
        client.fetch_configs("acme/pipe", library="diffusers")


def test_malformed_config_file_is_a_skip_with_reason(hub, client, tmp_path):
    hub.add("acme/broken", {"config.json": "{not json"}, library_name="transformers")
    out = tmp_path / "c.csv"
    catalog = refresh_catalog(5, out, client=client)
    planned = plan_entry(catalog.entries[0], STAGES, config_dir=catalog.config_dir)
    assert [s.reason for s in planned.outcome.stages] == ["malformed_config"] * 2


# ---- the model's own failures: rows with a reason ----------------------------------------------


def test_repo_gone_between_listing_and_fetching_and_gated_repo(hub, client, tmp_path):
    add_models(hub)
    hub.add("acme/gated", {"config.json": BERT}, gated=True, library_name="transformers")
    hub.add("acme/vanished", {"config.json": BERT}, library_name="transformers")
    # listed, then deleted: every later request for it is a 404
    hub.fault("acme/vanished/", times=99, status=404, headers={"X-Error-Code": "RepoNotFound"})
    out = tmp_path / "c.csv"
    catalog = refresh_catalog(10, out, client=client)
    assert [e.model_id for e in catalog.entries][-2:] == ["acme/gated", "acme/vanished"]
    assert catalog.get("acme/gated").gated is True
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["configs"] == {"fetched": 2, "gated": 1, "not_found": 1}
    reasons = {}
    for e in catalog.entries:
        planned = plan_entry(e, STAGES, config_dir=catalog.config_dir)
        if planned.outcome is not None:
            assert {s.status for s in planned.outcome.stages} == {Status.SKIP.value}
            reasons[e.model_id] = planned.outcome.stages[0].reason
    assert reasons == {"acme/gated": "gated", "acme/vanished": "not_found"}
    # online resolution says the same, without a catalog
    gated = CatalogEntry(model_id="acme/gated", library="transformers", model_type_hint="bert")
    assert plan_entry_online(gated, client).outcome.stages[0].reason == "gated"


def test_interrupted_refresh_goes_on_where_it_stopped(hub, client, tmp_path, sleeps):
    add_models(hub)
    hub.fault("/api/models/acme/pipe/revision", times=99, status=503)
    out = tmp_path / "c.csv"
    with pytest.raises(HubError):
        refresh_catalog(5, out, client=client)
    assert json.loads(out.with_suffix(".json").read_text())["status"] == "running"
    assert not out.exists()  # no catalog that looks complete
    hub.faults.clear()
    before = len(hub.asked("acme/bert/"))
    catalog = refresh_catalog(5, out, client=client)
    assert len(catalog.entries) == 2
    assert len(hub.asked("acme/bert/")) == before  # kept, not fetched again
    assert (out.with_suffix("") / "acme/pipe/unet/config.json").is_file()


def test_the_nightly_catalog_is_refreshed_online_and_goes_on_where_it_stopped(
    hub, client, tmp_path, sleeps
):
    """`hfsweep nightly`: online, the catalog is refreshed by default into a file of the day;
    a refresh the Hub stopped goes on from there when the night is started again."""
    import datetime as dt

    from sweep.nightly import nightly_catalog

    add_models(hub)
    hub.fault("/api/models/acme/pipe/revision", times=99, status=503)
    with pytest.raises(HubError):
        nightly_catalog(None, 5, tmp_path / "catalogs", client=client)
    hub.faults.clear()
    before = len(hub.asked("acme/bert/"))
    path = nightly_catalog(None, 5, tmp_path / "catalogs", client=client)
    assert path == str(tmp_path / "catalogs" / f"hub-{dt.date.today().isoformat()}-top5.csv")
    assert [e.model_id for e in load_catalog(path).entries] == ["acme/bert", "acme/pipe"]
    assert len(hub.asked("acme/bert/")) == before  # kept, not fetched again
    assert nightly_catalog("bundled", 5, tmp_path / "x", client=client) == "bundled"
    assert not (tmp_path / "x").exists()


# ---- provenance per component --------------------------------------------------------------------


def test_diffusers_component_provenance(hub, client, tmp_path):
    from sweep.rows import RunContext, model_rows

    add_models(hub)
    hub.add(  # the pipeline names a unet whose config the repo does not have
        "acme/pipe-no-unet-config",
        {"model_index.json": PIPELINE, "vae/config.json": {"_class_name": "AutoencoderKL"}},
        downloads=100,
        library_name="diffusers",
    )
    out = tmp_path / "c.csv"
    catalog = refresh_catalog(5, out, client=client)
    ctx = RunContext("r", "cpu", False, None, None, "fp32")
    sources = {}
    for model_id in ("acme/pipe", "acme/pipe-no-unet-config"):
        planned = plan_entry(catalog.get(model_id), STAGES, config_dir=catalog.config_dir)
        assert planned.spec is not None and planned.resolved.source == "hub"
        rows, _ = model_rows(ctx, planned, _passed(planned))
        sources[model_id] = {r["config_source"] for r in rows}
    assert sources == {"acme/pipe": {"hub"}, "acme/pipe-no-unet-config": {"diffusers_default"}}
    # the component read from the Hub really is the repo's: its cross-attention width came along
    planned = plan_entry(catalog.get("acme/pipe"), STAGES, config_dir=catalog.config_dir)
    assert planned.resolved.components["unet"]["cross_attention_dim"] == 768


def test_online_resolution_uses_the_client(hub, client):
    add_models(hub)
    entry = CatalogEntry(model_id="acme/pipe", library="diffusers")
    resolved = resolve_entry(entry, offline=False, hub=client)
    assert resolved.source == "hub" and set(resolved.components) >= {"unet", "vae"}
    assert all(is_config_file(p) for p in resolve_requests(hub))


def plan_entry_online(entry: CatalogEntry, client: HubClient):
    import model_configs.resolve as resolve

    saved = resolve._HUB
    resolve._HUB = client
    try:
        return plan_entry(entry, STAGES)  # the hub fixture set HF_HUB_OFFLINE=0
    finally:
        resolve._HUB = saved


def _passed(planned):
    from runners.outcome import ModelOutcome, StageResult

    return ModelOutcome(stages=[StageResult(stage=s.value, status="pass") for s in STAGES])


def test_check_looks_models_up_through_the_client(hub, monkeypatch):
    """`hfsweep check ORG/NAME` for a model outside the catalog (HF_ENDPOINT's Hub)."""
    import huggingface_hub

    from ground.errors import UsageError
    from sweep.commands.check import _entry_from_hub

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    monkeypatch.setenv("HFSWEEP_HUB_RETRIES", "0")
    add_models(hub)
    entry = _entry_from_hub("acme/bert")
    assert (entry.model_type_hint, entry.library, entry.downloads) == ("bert", "transformers", 1000)
    with pytest.raises(UsageError, match="unknown model id 'acme/nothing'"):
        _entry_from_hub("acme/nothing")
    hub.fault("/api/models/acme/bert", times=99, status=503)
    with pytest.raises(HubError, match="HTTP 503"):
        _entry_from_hub("acme/bert")


def test_the_probe_says_whether_the_hub_answers(hub):
    """One request: the fake Hub answers; a closed loopback port or a 5xx does not."""
    import socket

    from model_configs.hub import unreachable

    assert unreachable(endpoint=hub.url, timeout_s=5) is None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    why = unreachable(endpoint=f"http://127.0.0.1:{port}", timeout_s=5)
    assert why is not None and why.startswith(f"http://127.0.0.1:{port}: "), why
    hub.fault("GET /api/models?limit=1", status=503)
    assert unreachable(endpoint=hub.url, timeout_s=5) == f"{hub.url}: HTTP 503"


def test_timeout_and_retries_from_the_environment(monkeypatch):
    from ground.errors import UsageError

    monkeypatch.delenv("HFSWEEP_HUB_TIMEOUT", raising=False)
    monkeypatch.delenv("HFSWEEP_HUB_RETRIES", raising=False)
    default = HubClient(endpoint="http://127.0.0.1:9")
    assert (default.timeout_s, default.retry.attempts) == (30.0, 4)
    monkeypatch.setenv("HFSWEEP_HUB_TIMEOUT", "2.5")
    monkeypatch.setenv("HFSWEEP_HUB_RETRIES", "0")
    tuned = HubClient(endpoint="http://127.0.0.1:9")
    assert (tuned.timeout_s, tuned.retry.attempts) == (2.5, 1)
    monkeypatch.setenv("HFSWEEP_HUB_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="HFSWEEP_HUB_TIMEOUT"):
        HubClient(endpoint="http://127.0.0.1:9")


# ---- classification ------------------------------------------------------------------------------


def test_classify_offline_mode_is_fatal():
    from huggingface_hub.errors import OfflineModeIsEnabled

    assert classify(OfflineModeIsEnabled("offline")).kind == "fatal"
    assert classify(RuntimeError("bug")).kind == "fatal"
    chained = RuntimeError("outer")
    chained.__cause__ = json.JSONDecodeError("bad", "{", 0)
    assert classify(chained).kind == "transient"


# ---- the command -------------------------------------------------------------------------------


def _cli(hub: FakeHub, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "0",
        "HF_ENDPOINT": hub.url,
        "HFSWEEP_CACHE": str(tmp_path / "cache"),
        "HFSWEEP_HUB_TIMEOUT": "2",
        **env,
    }
    full_env.pop("HF_TOKEN", None)
    return subprocess.run(
        [*HFSWEEP, *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )


def test_catalog_refresh_command(hub, tmp_path):
    add_models(hub)
    out = tmp_path / "hub.csv"
    r = _cli(hub, tmp_path, "catalog", "refresh", "--top", "5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    assert "fetched 2" in r.stderr
    assert [e.model_id for e in load_catalog(str(out)).entries] == ["acme/bert", "acme/pipe"]
    assert all(is_config_file(p) for p in resolve_requests(hub))
    # the Hub failing for good: one line, exit 2, no traceback (a fresh cache: nothing to fall
    # back on)
    hub.fault("/api/models/acme/bert/revision", times=99, status=503)
    r = _cli(
        hub, tmp_path, "catalog", "refresh", "--top", "5", "--out", str(tmp_path / "b.csv"),
        HFSWEEP_HUB_RETRIES="1", HFSWEEP_CACHE=str(tmp_path / "cache2"),
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: the Hub kept failing to fetch the configs of acme/bert")
    assert "(HTTP 503; 2 tries)" in r.stderr  # HFSWEEP_HUB_RETRIES=1: one retry
    assert "Traceback" not in r.stderr and "hint:" in r.stderr


def test_online_resolution_reads_each_adapters_own_files(hub, client):
    """Non-transformers libraries: the files each adapter reads, fetched (and nothing else)."""
    hub.add(
        "acme/st",
        {
            "modules.json": [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ],
            "config.json": BERT,
            "sentence_bert_config.json": {"max_seq_length": 128},
            "1_Pooling/config.json": {"word_embedding_dimension": 32, "pooling_mode_cls_token": True},
            "model.safetensors": b"\0" * 64,
        },
        library_name="sentence-transformers",
    )  # fmt: skip
    hub.add(
        "acme/clip",
        {
            "open_clip_config.json": {"model_cfg": {"embed_dim": 512, "vision_cfg": {
                "image_size": 224, "layers": 12, "width": 768, "patch_size": 32},
                "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512,
                             "heads": 8, "layers": 12}}},
            "open_clip_pytorch_model.bin": b"\0" * 64,
        },
        library_name="open_clip",
    )  # fmt: skip
    hub.add(
        "acme/vit",
        {"config.json": {"architecture": "vit_tiny_patch16_224", "num_classes": 5},
         "model.safetensors": b"\0" * 64},
        library_name="timm",
    )  # fmt: skip
    st = resolve_entry(CatalogEntry("acme/st", library="sentence-transformers"), offline=False,
                       hub=client)  # fmt: skip
    assert st.source == "hub" and [m["type"] for m in st.config["modules"]] == [
        "Transformer", "Pooling"]  # fmt: skip
    assert st.config["modules"][1]["config"]["pooling_mode_cls_token"] is True
    clip = resolve_entry(CatalogEntry("acme/clip", library="open_clip"), offline=False, hub=client)
    assert clip.source == "hub" and clip.config["vision_cfg"]["patch_size"] == 32
    vit = resolve_entry(CatalogEntry("acme/vit", library="timm"), offline=False, hub=client)
    assert vit.source == "hub" and vit.config["num_classes"] == 5
    assert all(is_config_file(p) for p in resolve_requests(hub))
