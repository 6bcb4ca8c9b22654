"""What `check` and `lookup` print, as a new user reads it (issue 28's defects, each pinned):
the shrunk fields named, no redundant "(model=...)", a malformed config.json shown where it
breaks, a config without a model_type called so, a skipped model's skip said once, a long list
shortened, a cut error saying where the whole text is, `n/a` for a stage that does not apply
(never `not_run`), one wording of the time, and progress on a pipe from the first second."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from ground.errors import ConfigError, UsageError, format_error
from ground.schema import Status
from model_configs.spec import CatalogEntry, TinySpec
from reports.store import Store
from runners import faults
from runners.isolation import run_isolated
from runners.outcome import ModelOutcome, StageResult, failed_before, not_applicable_to
from runners.settings import ModelSettings
from sweep import cli
from sweep.plan import Planned
from sweep.rows import RunContext, config_row, model_rows
from tests.conftest import HFSWEEP, ROOT
from tests.neuron_support import forked
from tests.test_cli import in_fork
from tests.test_runner import tiny

STAGES = ["load", "forward", "backward", "compile", "generate"]
LAYER_TYPES = ["sliding_attention", "full_attention"] * 18  # 36, as gpt-oss-20b's


def hfsweep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HFSWEEP, *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


# ---- errors ------------------------------------------------------------------------------


def test_an_error_names_the_model_once() -> None:
    named = UsageError("no results for model 'a/b' in any run", model_id="a/b")
    assert format_error(named) == "error: no results for model 'a/b' in any run"
    other = UsageError("the store is empty", model_id="a/b", hint="run it first")
    assert format_error(other) == "error: the store is empty (model=a/b)\nhint: run it first"


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ('{"model_type": "llama", "hidden_size": 64,}', "no trailing comma"),
        ("{'model_type': 'llama'}", "single quotes"),
        ('{"model_type": "llama" "hidden_size": 64}', "a missing comma, quote or brace"),
    ],
)
def test_a_malformed_config_shows_where_it_breaks(tmp_path, text, cause) -> None:
    from model_configs.resolve import resolve_local

    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        resolve_local(path)
    assert "not valid JSON at line 1, column" in info.value.message
    hint = info.value.hint or ""
    assert cause in hint
    excerpt, caret = hint.splitlines()[1:3]
    # the caret stands under the column the parser names
    column = int(info.value.message.split("column ")[1].split(":")[0])
    start = max(0, column - 40)
    assert caret.index("^") - 2 == column - 1 - start and excerpt.startswith("  ")


def test_check_a_malformed_config_exits_2_with_the_place_and_no_model_suffix(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 64,}')
    proc = hfsweep("check", str(path))
    assert proc.returncode == 2
    assert "error: " in proc.stderr and "not valid JSON at line 1, column 43" in proc.stderr
    assert "(model=" not in proc.stderr
    assert "hint: a comma before the closing brace (JSON allows no trailing comma)" in proc.stderr
    assert '"hidden_size": 64,}' in proc.stderr and "Traceback" not in proc.stderr


@forked
def test_a_config_without_a_model_type_is_called_so_and_its_skip_said_once(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64}))
    proc = in_fork("check", str(path))
    assert proc.returncode == 1
    assert "not a JSON object" not in proc.stdout
    assert "the config has no model_type (its keys: hidden_size)" in proc.stdout
    table = proc.stdout.split("detail\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(table) == 1 and re.match(r"every stage +skip ", table[0])  # one line for all
    assert "next:    the config file is not a config transformers can read" in proc.stdout
    # progress on a pipe: the first phase is announced at once, flushed
    assert proc.stderr.splitlines()[0] == "[check] loading torch and the device ..."


@forked
def test_check_names_the_fields_it_shrank_and_the_next_step(tmp_path) -> None:
    proc = in_fork("check", "google-bert/bert-base-uncased", "--stages", "load,forward")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "fields shrunk" not in out
    assert "         shrunk " in out and "           num_hidden_layers: 12 -> " in out
    assert "           hidden_size: 768 -> " in out
    assert "next:    none: every stage passes on the device with no CPU fallback" in out
    time_line = next(line for line in out.splitlines() if line.startswith("time:"))
    assert "stages " in time_line and "model process " in time_line
    assert "(wall: set-up, stages, exit)" in time_line and "this command " in time_line
    # the phases before the first stage are on stderr, before the stage lines
    err = proc.stderr.splitlines()
    first_stage = next(i for i, line in enumerate(err) if line.startswith("[check] load  "))
    assert any("resolving and shrinking" in line for line in err[:first_stage])


# ---- generate is n/a, never not_run, for a model it does not apply to --------------------------


@pytest.fixture(scope="module")
def bert():
    return tiny("bert", "BertModel")


def test_generate_is_n_a_when_an_earlier_stage_fails(bert, monkeypatch, tmp_path) -> None:
    assert not_applicable_to(bert) == frozenset({"generate"})
    monkeypatch.setenv(
        faults.ENV, json.dumps([{"at": "stage:forward", "match": "*", "fault": "raise"}])
    )
    monkeypatch.setenv(faults.STATE_ENV, str(tmp_path / "f"))
    settings = ModelSettings(device="cpu", stages=tuple(STAGES))  # type: ignore[arg-type]
    raised = {r.stage: (r.status, r.reason) for r in run_isolated(bert, settings).stages}
    assert raised["forward"][0] == "fail" and raised["backward"] == ("not_run", None)
    assert raised["generate"] == ("skip", "not_applicable")
    # the process dying: the tail the parent writes says the same
    monkeypatch.setenv(
        faults.ENV, json.dumps([{"at": "stage:forward", "match": "*", "fault": "segfault"}])
    )
    died = {r.stage: (r.status, r.reason) for r in run_isolated(bert, settings).stages}
    assert died["forward"][0] == "crash" and died["generate"] == ("skip", "not_applicable")
    tail = failed_before(
        STAGES, Status.TIMEOUT, "Timeout", "x", not_applicable=frozenset({"generate"})
    )
    assert [r.status for r in tail.stages] == ["timeout", "not_run", "not_run", "not_run", "skip"]


# ---- lookup ------------------------------------------------------------------------------------


def _planned(model_id: str, rank: int, *, changes: dict, generative: bool = True) -> Planned:
    spec = TinySpec(
        library="transformers",
        model_type="gpt_oss",
        architecture="GptOssForCausalLM" if generative else "BertModel",
        config={"model_type": "gpt_oss", "num_experts_per_tok": 2},
        generative=generative,
        changes=changes,
    )
    entry = CatalogEntry(model_id=model_id, rank=rank, downloads=1000 // rank)
    return Planned(
        entry=entry,
        spec=spec,
        config_source="hub",
        config_hash=f"c-{model_id}",
        library="transformers",
        model_type="gpt_oss",
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store written the sweep's way (model_rows, config_row, one part per table)."""
    root = tmp_path_factory.mktemp("answers") / "store"
    store = Store(root)
    run = RunContext("r1", "neuron", True, "torchneuron-2026-04-21", "h", "fp32")
    long = "library '(none)' is not one this tool runs (supported: " + "x, " * 120 + "y)"
    models = {
        "org/skipped": (
            _planned("org/skipped", 1, changes={}),
            ModelOutcome(
                [StageResult(s, "skip", "unsupported_library", error_message=long) for s in STAGES]
            ),
        ),
        "org/lstm": (
            _planned("org/lstm", 2, changes={"hidden_size": [128, 16]}, generative=False),
            ModelOutcome(
                [
                    StageResult("load", "pass", duration_s=0.3),
                    StageResult(
                        "forward",
                        "fail",
                        error_type="NoHostKernelError",
                        error_message="aten::_thnn_fused_lstm_cell has no neuron kernel",
                        failing_op="aten::_thnn_fused_lstm_cell",
                        duration_s=0.1,
                    ),
                    StageResult("backward", "not_run", error_message="forward did not pass"),
                    StageResult("compile", "not_run", error_message="forward did not pass"),
                    StageResult(
                        "generate",
                        "skip",
                        "not_applicable",
                        error_message="generate does not apply to BertModel",
                    ),
                ],
                timings={"child_s": 2.5},
            ),
        ),
        "org/gemma-like": (
            _planned(
                "org/gemma-like",
                3,
                changes={
                    "layer_types": [LAYER_TYPES, LAYER_TYPES[:2]],
                    "num_hidden_layers": [36, 2],
                },
            ),
            ModelOutcome(
                [StageResult(s, "pass", duration_s=0.25) for s in STAGES],
                timings={"child_s": 4.0},
            ),
        ),
    }
    results, fallbacks, configs = [], [], []
    for planned, outcome in models.values():
        res, fb = model_rows(run, planned, outcome)
        results += res
        fallbacks += fb
        configs.append(config_row(run, planned))
    store.write_parts("r1", {"fallbacks": fallbacks, "configs": configs, "results": results})
    store.write(
        "runs",
        "r1",
        [
            {
                "run_id": "r1",
                "status": "finished",
                "updated_at": run_time(),
                "device": "neuron",
                "device_emulated": True,
                "dtype": "fp32",
                "stages": ",".join(STAGES),
            }
        ],
    )
    return str(root)


def run_time():
    import datetime as dt

    return dt.datetime(2026, 12, 4, tzinfo=dt.UTC)


def lookup(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["lookup", *args])
    return code, capsys.readouterr().out


def test_lookup_says_a_whole_skip_once_and_where_the_whole_message_is(store, capsys) -> None:
    code, out = lookup(capsys, "org/skipped", "--store", store)
    assert code == 1
    assert out.count("unsupported_library") == 2  # the title line and the one stage line
    assert out.count("library '(none)' is not one this tool runs") == 1
    assert re.search(r"^every stage +skip ", out, re.MULTILINE)
    assert "(… cut: every stored line of an error: hfsweep lookup org/skipped --format json)" in out
    assert "next: no adapter builds this repo's library" in out


def test_lookup_reads_n_a_for_a_stage_that_does_not_apply(store, capsys) -> None:
    code, out = lookup(capsys, "org/lstm", "--store", store)
    assert code == 1
    generate = next(line for line in out.splitlines() if line.startswith("generate"))
    assert generate.split()[1] == "n/a" and "not_run" not in generate
    assert "does not apply to this model" in generate
    assert "next: aten::_thnn_fused_lstm_cell has no neuron kernel and PyTorch has no CPU" in out
    assert "time: stages 0.40 s; model process 2.50 s (wall: set-up, stages, exit)" in out


def test_lookup_shortens_a_long_list_of_the_shrink(store, capsys) -> None:
    code, out = lookup(capsys, "org/gemma-like", "--store", store)
    assert code == 0
    line = next(x for x in out.splitlines() if x.strip().startswith("layer_types:"))
    assert line.strip() == (
        "layer_types: [36 items: 'sliding_attention', 'full_attention', ...] -> "
        "['sliding_attention', 'full_attention']"
    )
    assert "next: none: every stage passes" in out


def test_lookup_of_a_catalog_model_not_in_the_store_is_no_error(store, capsys) -> None:
    code, out = lookup(capsys, "meta-llama/Llama-3.1-8B", "--store", store)
    assert code == 5
    assert out.startswith("meta-llama/Llama-3.1-8B is in the catalog (rank 230")
    # a sweep of it, into this store: the next lookup answers (a check writes no rows)
    run = f"hfsweep run --models meta-llama/Llama-3.1-8B --device neuron --store {store}"
    assert f"run it with: {run}\n" in out
    assert "did you mean: meta-llama/Llama-3.1-8B-Instruct (catalog rank 39)" in out
    code, out = lookup(capsys, "meta-llama/Llama-3.1-8B", "--store", store, "--format", "json")
    data = json.loads(out)
    assert code == 5 and data["found"] is False and data["in_catalog"]["rank"] == 230
    assert data["check"] == run
    assert data["did_you_mean"][0]["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_the_id_meant_is_found_in_order() -> None:
    from reports.model_search import CatalogModel, find_model

    stored = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct", "bert-x"]
    catalog = [
        CatalogModel("meta-llama/Llama-3.1-8B-Instruct", 39, 900),
        CatalogModel("meta-llama/Llama-3.1-8B", 230, 100),
        CatalogModel("unsloth/Llama-3.1-8B", 400, 10),
    ]
    assert find_model("bert-x", stored, catalog).how == "exact"
    case = find_model("qwen/qwen2.5-vl-3b-instruct", stored, catalog)
    assert (case.model_id, case.how) == ("Qwen/Qwen2.5-VL-3B-Instruct", "case")
    found = find_model("meta-llama/Llama-3.1-8B", stored, catalog)
    assert found.model_id is None and found.in_catalog == catalog[1]
    # the same repo name under another owner first, then the stored -Instruct variant
    assert [(s.model_id, s.where) for s in found.suggestions] == [
        ("unsloth/Llama-3.1-8B", "catalog"),
        ("meta-llama/Llama-3.1-8B-Instruct", "store"),
    ]
    assert found.did_you_mean() == (
        "did you mean: unsloth/Llama-3.1-8B (catalog rank 400), "
        "meta-llama/Llama-3.1-8B-Instruct (has results)"
    )
    assert find_model("zzz/completely-else", stored, catalog).suggestions == []


@forked
def test_check_refuses_a_switch_the_model_does_not_take() -> None:
    proc = in_fork(
        "check", "google-bert/bert-base-uncased", "--stages", "load",
        "--implementation", "experts_implementation=batched_mm",
    )  # fmt: skip
    assert proc.returncode == 2
    assert (
        "error: --implementation experts_implementation=batched_mm: BertForMaskedLM takes "
        "attn_implementation (default sdpa)"
    ) in proc.stderr
    proc = in_fork("check", "google-bert/bert-base-uncased", "--implementation", "eager")
    assert proc.returncode == 2 and "give SWITCH=VALUE" in proc.stderr
