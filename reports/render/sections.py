"""A run report as titled tables (`reports.render.tables.Section`), the common ground of the text,
markdown and html renderers."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ground import fmt
from ground.schema import STAGE_ORDER
from ground.sizing_columns import NO_OWN_CONFIG
from reports.render.tables import Section
from runners import stages as stage_registry

STAGE_NAMES = tuple(s.value for s in STAGE_ORDER)


def title_line(report: dict[str, Any]) -> str:
    d = report["denominators"]
    dtypes = report.get("dtypes") or []
    return (
        f"hfsweep report: run {report['run_id']} ({d['run_status']}), device {d['device_label']}, "
        + (f"dtypes {', '.join(dtypes)}" if len(dtypes) > 1 else f"dtype {d.get('dtype') or '-'}")
    )


def denominators_section(d: dict[str, Any]) -> Section:
    """The tree of what was counted. Children add up to their parent."""
    models, dls = d["models"], d["downloads"]
    rows: list[list[str]] = []
    indent: list[int] = []

    def add(level: int, label: str, n: int | None, dl: int | None, base: bool = True) -> None:
        rows.append(
            [
                label,
                fmt.of(n, models) if base else fmt.count(n),
                fmt.dl_of(dl, dls) if base else fmt.downloads(dl),
            ]
        )
        indent.append(level)

    add(0, "catalog", d.get("catalog_size"), None, base=False)
    add(0, "requested by this run", d.get("models_requested"), None, base=False)
    if d.get("not_yet_in_store"):
        add(1, "requested, no rows yet (in flight or lost)", d["not_yet_in_store"], None, False)
    add(0, "models in this run (the base of every share)", models, dls)
    add(1, "skipped (not attempted)", d["skipped"], d["skipped_downloads"])
    for r in d["skipped_by_reason"]:
        add(2, r["reason"], r["models"], r["downloads"])
    add(1, "swept (attempted)", d["swept"], d["swept_downloads"])
    add(2, "failed", d["failed"], d["failed_downloads"])
    for r in d["failed_by_stage"]:
        add(3, f"at {r['stage']}: {r['status']}", r["models"], r["downloads"])
    if d["partial"]:
        add(2, "no failure, a stage skipped", d["partial"], d["partial_downloads"])
        for r in d["partial_by_reason"]:
            add(3, r["reason"], r["models"], r["downloads"])
    add(2, "passed every stage", d["passed"], d["passed_downloads"])
    add(
        3,
        "with no CPU fallback (entirely on the device)",
        d["passed_on_device"],
        d["passed_on_device_downloads"],
    )
    add(3, "with CPU fallback", d["passed_with_fallback"], d["passed_with_fallback_downloads"])
    if d.get("reused"):
        add(0, "swept, rows reused from an earlier run", d["reused"], d["reused_downloads"])
        for r in d.get("reused_by_run") or []:
            add(1, f"from run {r['run_id']}", r["models"], r["downloads"])
        add(0, "swept, run by this run", d["swept"] - d["reused"], None, base=False)
    sources = d.get("swept_by_config_source") or []
    if sources:
        add(0, "swept, by where the config came from", d["swept"], d["swept_downloads"])
        for r in sources:
            own = "a default, not the repo's own" if r["default"] else "the repo's own"
            add(1, f"{r['source']} ({own})", r["models"], r["downloads"])
    quantized = d.get("quantized") or {}
    if quantized.get("models"):
        add(0, "quantized checkpoints", quantized["models"], quantized["downloads"])
        add(1, "run (their method's path)", quantized["run"], quantized["run_downloads"])
        for r in quantized["by_method"]:
            if r["run"]:
                add(2, r["method"], r["run"], r["run_downloads"])
        add(1, "skipped", quantized["skipped"], quantized["skipped_downloads"])
        for r in quantized["by_method"]:
            if r["skipped"]:
                why = ", ".join(r["skip_reasons"])
                add(2, f"{r['method']} ({why})", r["skipped"], r["skipped_downloads"])
    notes = [
        f"Shares are of the {fmt.count(models)} models in this run and of their "
        f"{fmt.downloads(dls)} downloads (30-day counts at catalog time"
        + (f", {d['catalog_date']}" if d.get("catalog_date") else "")
        + ").",
        "skipped + swept = models in this run; failed + passed (+ stage-skipped) = swept.",
    ]
    if d.get("reused"):
        notes.append(
            f"{fmt.count(d['reused'])} of the swept models had rows equal to an earlier run's "
            "(the same task key: tiny config, software, settings and code), copied from it "
            "(`reused_from`) instead of run again; timeouts, crashes and OOMs are never reused."
        )
    if sources:
        notes.append(
            f"{fmt.count(d['built_from_default'])} of the swept models "
            f"({fmt.dl_of(d['built_from_default_downloads'], dls)} of downloads) were built "
            "from a default config for their architecture, not their own (offline the bundled "
            "catalog holds no config files)."
        )
    return Section("denominators", "Denominators", ["", "models", "downloads"], rows, notes, indent)


def quantized_section(report: dict[str, Any]) -> Section:
    """Quantized checkpoints by method: run or skipped, and how far the run ones got."""
    q = report["denominators"].get("quantized") or {"by_method": []}
    stages = report.get("stages") or STAGE_NAMES
    rows = [
        [
            r["method"],
            fmt.count(r["models"]),
            fmt.downloads(r["downloads"]),
            fmt.count(r["run"]),
            *(fmt.count(r["stages_passed"].get(stage)) for stage in stages),
            fmt.count(r["skipped"]),
            ", ".join(r["skip_reasons"]),
        ]
        for r in q["by_method"]
    ]
    return Section(
        "quantized",
        "Quantized checkpoints by method",
        ["method", "models", "downloads", "run", *stages, "skipped", "skip reason"],
        rows,
        [
            "A row's `quantization` is the method its checkpoint needs (its quantization_config, "
            "else the catalog's tags). Run: built through that method's path here; the stage "
            "columns count models that passed each stage."
        ],
    )


def funnel_section(report: dict[str, Any]) -> Section:
    rows = []
    for line in report["funnel"]:
        rows.append(
            [
                line["line"],
                fmt.count(line.get("applies")),
                fmt.count(line["passed"]),
                fmt.pct(line["passed_share"]),
                fmt.pct(line["passed_downloads_share"]),
                fmt.count(line.get("no_fallback")) if line["stage"] else "",
                fmt.pct(line.get("no_fallback_downloads_share")) if line["stage"] else "",
                fmt.count(line.get("failed")) if line["stage"] else "",
                fmt.count(line.get("not_run")) if line["stage"] else "",
                fmt.count(line.get("skipped")) if line["stage"] else "",
            ]
        )
    d = report["denominators"]
    return Section(
        "funnel",
        "Funnel: models that passed each stage",
        [
            "passed",
            "applies to",
            "models",
            "% models",
            "% downloads",
            "no fallback",
            "% dl no fallback",
            "failed",
            "not run",
            "skipped",
        ],
        rows,
        [
            f"Base: the {fmt.count(d['models'])} models of the run (skipped ones included), "
            "less, for each stage, the models it does not apply to ('applies to'; generate "
            "does not apply to an encoder; a model that stopped at an earlier stage counts). "
            "'no fallback' = passed with no op falling back to the CPU in that stage; 'skipped' "
            "counts stages skipped for the model (not applicable, or the device's reason)."
        ],
    )


def stage_columns(first: str) -> list[str]:
    """The header of `stage_rows`' table, its first column named `first`."""
    return [
        first,
        "passed",
        "% models",
        "% downloads",
        "no fallback",
        "% dl no fallback",
        "failed",
        "not run",
        "skipped",
    ]


def stage_rows(lines: list[dict[str, Any]]) -> list[list[str]]:
    """A stage group's table: per stage that has rows, its label, passed (count, % of models,
    % of downloads), no fallback (count, % of downloads), failed, not run, skipped."""
    return [
        [
            line["label"],
            fmt.count(line["passed"]),
            fmt.pct(line["passed_share"]),
            fmt.pct(line["passed_downloads_share"]),
            fmt.count(line["no_fallback"]),
            fmt.pct(line["no_fallback_downloads_share"]),
            fmt.count(line["failed"]),
            fmt.count(line["not_run"]),
            fmt.count(line["skipped"]),
        ]
        for line in lines
        if line["rows"]
    ]


def fine_tune_section(report: dict[str, Any]) -> Section:
    """Can I fine-tune on the device: the training stages, by models and by downloads."""
    f = report["fine_tune"]
    rows = stage_rows(f["stages"])
    lora = f["lora"]
    notes = [
        "Fine-tunes on the device with no CPU fallback, by downloads: "
        f"{fmt.pct(f['default_no_fallback_downloads_share'])} with PyTorch's default AdamW, "
        f"{fmt.pct(f['fused_no_fallback_downloads_share'])} with AdamW(fused=True) "
        "(the optimizer stage passed, forward, backward, clip_grad_norm_, step and zero_grad "
        "included, and no op fell back in it).",
        f"Base: the {fmt.count(f['models'])} models of the run; "
        f"{fmt.count(f['backward_passed'])} passed backward, which every training stage builds "
        "on (the others are 'not run').",
        f"LoRA ran on {fmt.count(lora['ran'])} models ({fmt.downloads(lora['ran_downloads'])} "
        f"downloads) whose model type has peft default target modules; "
        f"{fmt.pct(lora['passed_downloads_share_of_ran'])} of their downloads trained. Skipped: "
        + (
            ", ".join(f"{r['reason']} {fmt.count(r['models'])}" for r in lora["skipped_by_reason"])
            or "none"
        )
        + ".",
    ]
    calls = f.get("step_op_calls") or {}
    if calls:
        shown = "; ".join(
            f"{stage}: median {fmt.count(round(c['median']))} (min {fmt.count(c['min'])}, "
            f"max {fmt.count(c['max'])}, {fmt.count(c['models'])} models)"
            for stage, c in sorted(calls.items())
        )
        notes.append(
            "Device op calls in the optimizer's part of one step (clip_grad_norm_, step, "
            f"zero_grad), where the device counts them: {shown}."
        )
    return Section(
        "fine_tune",
        "Fine-tuning: can I train on the device?",
        stage_columns("training stage"),
        rows,
        notes,
    )


def sizing_status_text(status: str | None) -> str:
    """A model's sizing status in words (`no_own_config`: not sized: no config of its own)."""
    return "no config of its own" if status == NO_OWN_CONFIG else (status or "not planned")


def headline_switches(h: dict[str, Any]) -> str:
    """The switches the headline's "with" figure rests on: `experts_implementation=batched_mm`
    (or several joined with "or")."""
    return " or ".join(h.get("switches") or []) or "no switch"


def cores_needed_section(report: dict[str, Any]) -> Section:
    """At full size: the cores each model needs on the device's primary hardware type, by
    models and by downloads (docs/sizing.md)."""
    c = report.get("cores_needed") or {}
    total = c.get("downloads") or 0
    rows = [
        [
            b["cores"],
            *(
                cell
                for w in ("serve", "finetune", "lora")
                for cell in (fmt.count(b[f"{w}_models"]), fmt.pct(b[f"{w}_downloads_share"]))
            ),
        ]
        for b in c.get("buckets") or []
    ]
    notes = [
        *(
            [
                f"Cores on {c.get('hardware') or '-'}: the smallest tensor-parallel degree whose "
                "share of the memory fits one core (a power of two dividing the attention heads);"
                f" serving at bf16 with a {fmt.count(c.get('serve_context'))}-token context and "
                f"a batch of {c.get('serve_batch') or '-'}, a full fine-tune with AdamW in mixed "
                "precision, LoRA at peft's default rank. The formula and its constants: "
                "docs/sizing.md."
            ]
            if c.get("sized")
            else []
        ),
        "Shares are of all the run's downloads, every model counted. Sized from the repo's own "
        f"config: {fmt.of(c.get('sized'), c.get('models'))} models, "
        f"{fmt.dl_of(c.get('sized_downloads'), total)} downloads"
        + (
            "; not sized: "
            + ", ".join(
                f"{sizing_status_text(r['status'])} {fmt.count(r['models'])} "
                f"({fmt.pct(r.get('downloads_share'))} of downloads)"
                for r in c["not_sized"]
            )
            if c.get("not_sized")
            else ""
        )
        + ".",
    ]
    if c.get("no_own_config"):
        notes.append(
            f"{fmt.counted(c['no_own_config'], 'model')} "
            f"({fmt.pct(c['no_own_config_downloads_share'])} of downloads) had no config of "
            "their own, only their library's default for the model type (an offline run reads "
            "no config file): that default says nothing of the model's size, so they are not "
            "sized here, nor in the models table's columns and filters. A model's page shows "
            "what the default config would need, labelled so."
        )
    if c.get("models") and not c.get("sized"):
        notes.append(
            "No model of this run has a size of its own, so the table is empty: run with the "
            "Hub reachable (without HF_HUB_OFFLINE) or check a config.json of the model to size "
            "it. How sizes are computed: docs/sizing.md."
        )
    for h in (c.get("per_hardware") or []) if c.get("sized") else []:
        notes.append(
            f"{h['hardware']} ({fmt.byte_size(h['core_memory_bytes'])} per core, "
            f"{h['cores_per_chip']} per chip, {h['cores_per_instance']} per instance): serves on "
            f"one core {fmt.pct(h['serve_one_core_downloads_share'])} of downloads, fine-tunes "
            f"on one chip {fmt.pct(h['finetune_one_chip_downloads_share'])}, serves, fine-tunes "
            f"and trains LoRA on one instance {fmt.pct(h['fits_instance_downloads_share'])}."
        )
    return Section(
        "cores_needed",
        "Cores needed, by downloads",
        [
            "cores",
            "serve: models",
            "% downloads",
            "fine-tune: models",
            "% downloads",
            "LoRA: models",
            "% downloads",
        ],
        rows,
        notes,
    )


def optimizer_ops_section(report: dict[str, Any]) -> Section:
    """The ops that fall back in the optimizer's part of a step, by downloads."""
    rows = [
        [
            r["op"],
            fmt.count(r["models"]),
            fmt.downloads(r["downloads"]),
            fmt.pct(r["downloads_share"]),
            fmt.count(r["calls"]),
            fmt.count(r["fused_models"]),
            fmt.count(r["removed_by_fused"]),
            fmt.downloads(r["removed_by_fused_downloads"]),
            fmt.text(r["top_models"]),
        ]
        for r in report["fine_tune"]["optimizer_ops"]
    ]
    return Section(
        "optimizer_ops",
        "Optimizer ops that fall back to the CPU, ranked by downloads",
        [
            "op",
            "models (default AdamW)",
            "downloads",
            "% dl",
            "calls",
            "models (fused)",
            "fused removes it",
            "dl fused removes it",
            "most downloaded",
        ],
        rows,
        [
            "Ops that fell back only in the optimizer's part of a training step "
            "(clip_grad_norm_, AdamW.step, zero_grad), as the device records them op by op "
            "(the emulated device); 'fused removes it': models whose fused step passed without "
            "it."
        ],
        text_below={8: "most downloaded"},
    )


def sharding_section(report: dict[str, Any]) -> Section:
    """Can I shard it on the device: the distributed stages, by models and by downloads."""
    sh = report["sharding"]
    rows = [
        [
            line["label"],
            fmt.count(line["passed"]),
            fmt.pct(line["passed_share"]),
            fmt.pct(line["passed_downloads_share"]),
            fmt.count(line["failed"]),
            fmt.count(line["not_run"]),
            fmt.count(line["skipped"]),
        ]
        for line in sh["stages"]
        if line["rows"]
    ]
    no_plan = sh["no_plan"]
    rows.append(
        [
            "no tensor-parallel plan (tp skipped)",
            fmt.count(no_plan["models"]),
            fmt.pct(share_of(no_plan["models"], sh["models"])),
            fmt.pct(sh["no_plan_downloads_share"]),
            "-",
            "-",
            "-",
        ]
    )
    sizes = ", ".join(str(w) for w in sh["world_sizes"]) or "-"
    notes = [
        f"Each stage ran the tiny model on a group of ranks of the device (world size {sizes}), "
        "one process per rank, and compared it with one process taking the same steps.",
        f"Base: the {fmt.count(sh['models'])} models of the run ({fmt.downloads(sh['downloads'])} "
        "downloads), skips included; a stage builds on load, forward and backward ('not run' "
        "when one of them did not pass); 'skipped' counts the stage skipped for a model the run "
        "swept (a model skipped whole is counted once, in the run's skipped).",
        "'no tensor-parallel plan': models whose library has no plan for them (transformers' "
        "base_model_tp_plan): the tp stage skipped them"
        + (f" (most downloaded: {', '.join(no_plan['top_models'])})" if no_plan["models"] else "")
        + ".",
    ]
    return Section(
        "sharding",
        "Sharding: can I train or split it across ranks of the device?",
        [
            "distributed stage",
            "passed",
            "% models",
            "% downloads",
            "failed",
            "not run",
            "skipped",
        ],
        rows,
        notes,
    )


def hf_stack_section(report: dict[str, Any]) -> Section:
    """Does Hugging Face's training stack run on the device: the hf_training stages."""
    hf = report["hf_stack"]
    rows = [
        [
            line["label"],
            fmt.count(line["passed"]),
            fmt.pct(line["passed_share"]),
            fmt.pct(line["passed_downloads_share"]),
            fmt.count(line["failed"]),
            fmt.count(line["not_run"]),
            fmt.count(line["skipped"]),
        ]
        for line in hf["stages"]
        if line["rows"]
    ]
    notes = [
        "Each stage trained the tiny model through the library's own trainer, with the device "
        "found the way transformers and accelerate find it, proved the parameters and the "
        "optimizer's state on the device after the steps ('trained on cpu, not on DEVICE' "
        "otherwise), and compared the losses per step and the parameters with the same "
        "trainer on the CPU.",
        f"Base: the {fmt.count(hf['models'])} models of the run ({fmt.downloads(hf['downloads'])} "
        "downloads), skips included (sft applies to causal language models only); a stage "
        "builds on load, forward and backward ('not run' when one of them did not pass).",
    ]
    return Section(
        "hf_stack",
        "Hugging Face training stack: do its own trainers train on the device?",
        ["hf_training stage", "passed", "% models", "% downloads", "failed", "not run", "skipped"],
        rows,
        notes,
    )


def hf_stack_blockers_section(report: dict[str, Any]) -> Section:
    """What stops the hf_training stages, by the downloads it blocks: in the device (an op or
    collective) or in a library's device path (its file and function)."""
    rows = [
        [
            r["blocker"],
            r["kind"],
            fmt.text(r["stages"]),
            fmt.count(r["models"]),
            fmt.downloads(r["downloads"]),
            fmt.pct(r["downloads_share"]),
            fmt.text(r["error_types"] or ["-"]),
            fmt.text(r["top_models"]),
        ]
        for r in report["hf_stack"]["blockers"]
    ]
    return Section(
        "hf_stack_blockers",
        "What stops Hugging Face's training stack, ranked by downloads",
        ["blocker", "in", "stages", "models", "downloads", "% dl", "error", "most downloaded"],
        rows,
        [
            "in: 'device' names the op or collective that failed; 'library' the innermost "
            "frame of transformers, accelerate, trl, peft or datasets in the failure's "
            "traceback (a library's device path); 'other' neither (its error type)."
        ],
    )


def share_of(part: int | None, whole: int | None) -> float | None:
    return None if not whole or part is None else part / whole


def sharding_blockers_section(report: dict[str, Any]) -> Section:
    """The collectives and ops that stop sharding, by the downloads they block."""
    rows = [
        [
            r["op"],
            fmt.text(r["stages"]),
            fmt.count(r["models"]),
            fmt.downloads(r["downloads"]),
            fmt.pct(r["downloads_share"]),
            fmt.text(r["evidence"] or ["-"]),
            fmt.text(r["statuses"]),
            fmt.text(r["top_models"]),
        ]
        for r in report["sharding"]["blockers"]
    ]
    return Section(
        "sharding_blockers",
        "What stops sharding, ranked by downloads",
        [
            "collective or op",
            "stages",
            "models",
            "downloads",
            "% dl",
            "evidence",
            "statuses",
            "most downloaded",
        ],
        rows,
        [
            "The collective (c10d::...) or op a failed distributed stage names, else its error "
            "type in parentheses. 'evidence': what the verdict rests on, in the compile "
            "evidence vocabulary (registered: TorchNeuron's process group defines it or its "
            "DTensor rule exists; raises: its code raises, or it defines no such collective; "
            "'-': the device declares nothing)."
        ],
    )


def band_section(report: dict[str, Any]) -> Section:
    """Compile, and every stage, as a band: with evidence for every compiler verdict, and at
    most (unless the unverified ops fail)."""
    b = report.get("band") or {}
    rows = [
        [
            line["line"],
            fmt.count(line["with_evidence"]),
            fmt.pct(line["with_evidence_share"]),
            fmt.pct(line["with_evidence_downloads_share"]),
            fmt.count(line["at_most"]),
            fmt.pct(line["at_most_share"]),
            fmt.pct(line["at_most_downloads_share"]),
        ]
        for line in b.get("lines", [])
    ]
    if b.get("recorded"):
        notes = [
            "'lowers with evidence': every graph op the device's compiler took to lower rests "
            "on evidence (the device's registrations, decompositions or tests, or upstream "
            "torch-mlir); 'at most': also the models whose compile passed on ops no evidence "
            f"decides, unless those ops fail ({fmt.count(b.get('unverified_models'))} models, "
            f"{fmt.downloads(b.get('unverified_downloads'))} downloads; their ops are in the "
            "missing-ops ranking as absence of evidence)."
        ]
    else:
        notes = [
            "No compile verdict in this run records its evidence (a device whose compiler "
            "reports none, or rows written before it was recorded): both ends are the same."
        ]
    return Section(
        "band",
        "Compile evidence band: passes with evidence, and at most",
        [
            "passed",
            "with evidence",
            "% models",
            "% downloads",
            "at most",
            "% models",
            "% downloads",
        ],
        rows,
        notes,
    )


def headline_scope(h: dict[str, Any]) -> str:
    """The models the headline counts, as they are: the top N of the task, or every model of
    the task in a run that has fewer than N of them."""
    if h["models"] >= h["top"]:
        return f"the {fmt.count(h['top'])} most downloaded {h['task']} models"
    return f"this run's {fmt.counted(h['models'], h['task'] + ' model')} (all it has)"


def headline_title(h: dict[str, Any]) -> str:
    """`Headline: architectures of the top 100 text-generation models` (or of the run's 9)."""
    if h["models"] >= h["top"]:
        return f"Headline: architectures of the top {fmt.count(h['top'])} {h['task']} models"
    return f"Headline: architectures of the run's {fmt.count(h['models'])} {h['task']} models"


def headline_section(report: dict[str, Any]) -> Section:
    h = report["headline"]
    rows = [
        [
            a["architecture"],
            fmt.count(a["models"]),
            fmt.count(a["passed"]),
            "yes" if a["passes"] else "no",
            "yes" if a["passes_on_device"] else "no",
            a["first_problem"] or "",
        ]
        for a in h["list"]
    ]
    if not h["models"]:
        return Section(
            "headline",
            f"Headline: architectures of the top {fmt.count(h['top'])} {h['task']} models",
            ["architecture", "models", "passed", "passes", "no fallback", "first problem"],
            [],
            [f"No {h['task']} model in this run."],
        )
    notes = [
        f"Of the {h['architectures']} distinct architectures behind {headline_scope(h)}, "
        f"{h['passing']} pass every stage as is "
        f"({fmt.pct(h['passing_share'])}; with evidence for every compile verdict "
        f"{h.get('passing_with_evidence', h['passing'])}, "
        f"{fmt.pct(h.get('passing_with_evidence_share', h['passing_share']))}); "
        f"{h['passing_on_device']} with no CPU fallback "
        f"({fmt.pct(h['passing_on_device_share'])}). An architecture passes when all its models "
        "among them pass."
        + (
            f" The headline takes up to the {fmt.count(h['top'])} most downloaded."
            if h["models"] < h["top"]
            else ""
        ),
    ]
    if h.get("passing_with_switch", h["passing"]) > h["passing"]:
        notes.append(
            f"With {headline_switches(h)}: {h['passing_with_switch']} of "
            f"{h['architectures']} ({fmt.pct(h['passing_with_switch_share'])}), every failing "
            "model of an architecture run again with that switch of its own code passing every "
            "stage (--alternatives)."
        )
    if h["models_without_architecture"]:
        notes.append(
            f"{h['models_without_architecture']} of the {h['models']} models have no "
            "architecture (e.g. GGUF / MLX repos, no config) and are not counted above."
        )
    return Section(
        "headline",
        headline_title(h),
        ["architecture", "models", "passed", "passes", "no fallback", "first problem"],
        rows,
        notes,
    )


def breakdown_section(key: str, rows_in: list[dict[str, Any]]) -> Section:
    rows = [
        [
            r["key"],
            fmt.count(r["models"]),
            fmt.downloads(r["downloads"]),
            fmt.count(r["skipped"]),
            fmt.count(r["failed"]),
            fmt.count(r["passed"]),
            fmt.count(r["on_device"]),
            fmt.pct(r["passed_downloads_share"]),
            fmt.pct(r["on_device_downloads_share"]),
        ]
        for r in rows_in
    ]
    return Section(
        f"by_{key}",
        f"By {key.replace('_', ' ')}",
        [
            key,
            "models",
            "downloads",
            "skipped",
            "failed",
            "passed",
            "no fallback",
            "% dl passed",
            "% dl no fallback",
        ],
        rows,
    )


def failure_text(r: dict[str, Any], limit: int = 140) -> str:
    """A failure as users read it: `ErrorType: message`, the real message (numbers and all) of
    its first line cut at a word boundary; the normalised signature only when no message was
    kept."""
    message = fmt.first_line(r.get("example_message") or r.get("error_message"))
    if not message:
        return fmt.clip(r.get("signature") or r.get("error_signature") or "", limit)
    kind = r.get("error_type")
    return fmt.clip(f"{kind}: {message}" if kind else message, limit)


def failures_section(report: dict[str, Any]) -> Section:
    clusters = report["failure_clusters"]
    rows = [
        [
            failure_text(r),
            r.get("failing_op") or "-",
            fmt.count(r["models"]),
            fmt.dl_of(r["downloads"], None),
            fmt.pct(r["downloads_share"]),
            fmt.text(r["stages"]),
            fmt.text(r["statuses"]),
            fmt.text(r["top_models"][:3]),
        ]
        for r in clusters
    ]
    return Section(
        "failures",
        "Failure clusters (first failing stage, by error)",
        [
            "error (of the most downloaded model)",
            "op",
            "models",
            "downloads",
            "% dl",
            "stages",
            "status",
            "most downloaded",
        ],  # fmt: skip
        rows,
        [
            "Models are grouped by their first failure's error with its numbers, names and "
            "paths set aside; each line shows the real error of its most downloaded model."
        ],
        keys=[r["signature"] for r in clusters],
        text_below={0: "", 7: "most downloaded"},
    )


def skips_section(report: dict[str, Any]) -> Section:
    rows = [
        [
            r["reason"],
            r["scope"],
            fmt.count(r["models"]),
            fmt.downloads(r["downloads"]),
            fmt.pct(r["downloads_share"]),
            fmt.text(r["top_models"][:3]),
        ]
        for r in report["skip_reasons"]
    ]
    return Section(
        "skips",
        "Skips by reason",
        ["reason", "scope", "models", "downloads", "% dl", "most downloaded"],
        rows,
        ["scope 'model': nothing was attempted; 'stage': a stage was skipped for the device."],
        text_below={5: "most downloaded"},
    )


def next_steps_section(report: dict[str, Any]) -> Section:
    """Every model that is not a clean pass, by failure class, with the class's next step
    (ground/data/next_steps.json) and the models a switch of their own code made pass."""
    classes = report.get("next_steps") or []
    rows = [
        [
            c["title"],
            fmt.count(c["models"]),
            fmt.pct(c["downloads_share"]),
            ", ".join(f"{n} with {k}" for k, n in c["proven"].items()) or "-",
            fmt.text(c["top_models"][:2]),
        ]
        for c in classes
    ]
    return Section(
        "next_steps",
        "Next steps by failure class",
        ["failure class", "models", "% dl", "pass when run with", "most downloaded"],
        rows,
        [f"{c['title']}: {c['step']}" for c in classes]
        + [
            "Each class's step is its most downloaded model's (hfsweep lookup MODEL gives each "
            "model's own); 'pass when run with': models run again with a switch of their own "
            "code, every stage passing (the alternatives table)."
        ],
    )


def ops_section(report: dict[str, Any]) -> Section:
    rows = [
        [
            r["op"],
            fmt.count(r["blocked_models"]),
            fmt.downloads(r["blocked_downloads"]),
            fmt.pct(r["blocked_downloads_share"]),
            fmt.count(r["models"]),
            fmt.count(r["failing_models"]),
            fmt.count(r.get("unverified_models")),
            r.get("evidence") or "",
            fmt.count(r["calls"]),
            fmt.text(r["sources"]),
            fmt.count(r["sole_models"]),
            fmt.downloads(r["sole_downloads"]),
            fmt.op_sweep_cell(r.get("op_sweep")),
        ]
        for r in report["missing_ops"]
    ]
    return Section(
        "ops",
        "Missing ops, ranked by the downloads they touch",
        [
            "op",
            "models",
            "downloads",
            "% dl",
            "fell back in",
            "failure names it",
            "no evidence in",
            "evidence",
            "calls",
            "source",
            "only obstacle",
            "dl on device if lowered",
            "op sweep pass rate",
        ],
        rows,
        [
            "'no evidence in': models whose compile took the op to lower with nothing deciding "
            "it; 'evidence': evidence of absence (a fallback or a failure names the op) or "
            "absence of evidence (only such compile verdicts: those models pass unless it fails).",
            "'only obstacle': models that passed every stage with this op as their only CPU "
            "fallback; lowering it makes their downloads run entirely on the device.",
            "'op sweep pass rate': the op's own results over PyTorch's OpInfo samples on the "
            "device (`hfsweep ops`), with its verdict; '-' when no op-sweep run covers it.",
        ],
        # the text keeps what ranks an op and what lowering it gives; how it touches the models
        # (fell back, named, unverified, calls, source) is in markdown, JSON and /ops
        text_columns=(0, 1, 2, 3, 7, 10, 11),
        text_below={12: "op sweep pass rate"},
    )


def trend_section(report: dict[str, Any]) -> Section:
    trend = report["coverage_over_runs"]
    # a line per run, or per run and dtype where some run swept several dtypes
    by_dtype = any((r.get("dtypes") or 1) > 1 for r in trend)
    rows = [
        [
            r["run_id"],
            *([r.get("dtype") or "-"] if by_dtype else []),
            r["status"],
            r["device_label"],
            fmt.count(r["models"]),
            fmt.pct(r["passed_share"]),
            fmt.pct(r["passed_downloads_share"]),
            fmt.pct(r["on_device_downloads_share"]),
        ]
        for r in trend
    ]
    return Section(
        "runs",
        "Coverage over runs",
        [
            "run",
            *(["dtype"] if by_dtype else []),
            "status",
            "device",
            "models",
            "% passed",
            "% dl passed",
            "% dl no fallback",
        ],
        rows,
    )


def stage_group_section(key: str, report: dict[str, Any]) -> Section:
    """A stage group's section where the reading side has none of its own: its stages, by
    models and by downloads (`summary.other_groups`), titled as the group declares."""
    g = report["stage_groups"][key]
    rows = stage_rows(g["stages"])
    return Section(
        key,
        g["title"],
        stage_columns("stage"),
        rows,
        [
            f"Base: the {fmt.count(g['models'])} models of the run "
            f"({fmt.downloads(g['downloads'])} downloads), skips included; 'not run': a stage "
            "it builds on did not pass; 'skipped': the stage skipped for a model the run swept."
        ],
    )


# The sections the reading side writes for a stage group, by the key a group declares (the
# funnel is always there). The cores-needed section follows fine-tuning's (what it takes to
# serve and to fine-tune).
GROUP_SECTIONS: dict[str, list[Callable[[dict[str, Any]], Section]]] = {
    "fine_tune": [fine_tune_section, optimizer_ops_section],
    "sharding": [sharding_section, sharding_blockers_section],
    "hf_stack": [hf_stack_section, hf_stack_blockers_section],
}


def _group_sections(report: dict[str, Any]) -> list[Callable[[dict[str, Any]], Section]]:
    """Each stage group's section that the run ran, in the registry's order of the groups."""
    views = [report, *(report.get("by_dtype") or {}).values()]
    out: list[Callable[[dict[str, Any]], Section]] = []
    for key in dict.fromkeys(g.section for g in stage_registry.stage_groups()):
        ran = any(
            ((view.get("stage_groups") or {}).get(key) or view.get(key) or {}).get("ran")
            for view in views
            if key != "funnel"
        )
        if ran:
            out += GROUP_SECTIONS.get(key) or [partial(stage_group_section, key)]
        if key == "fine_tune" and (report.get("cores_needed") or {}).get("ran"):
            out.append(cores_needed_section)
    return out


def section_builders(report: dict[str, Any]) -> list[Callable[[dict[str, Any]], Section]]:
    """The report's sections, in order, each a function of the report (or of one dtype's view of
    it: a run of several dtypes builds each once per dtype and puts them side by side); the
    stage groups' come from the stage registry (each group declares the section that counts
    it)."""
    return [
        lambda r: denominators_section(r["denominators"]),
        quantized_section,
        funnel_section,
        band_section,
        headline_section,
        *_group_sections(report),
        failures_section,
        skips_section,
        next_steps_section,
        ops_section,
        *(partial(_breakdown_of, key) for key in report["breakdowns"]),
        trend_section,
    ]


def _breakdown_of(key: str, report: dict[str, Any]) -> Section:
    return breakdown_section(key, report["breakdowns"][key])


def report_sections(report: dict[str, Any]) -> list[Section]:
    builders = section_builders(report)
    if len(report.get("dtypes") or []) > 1 and report.get("by_dtype"):
        from reports.render.dtype_sections import sections_by_dtype

        out = sections_by_dtype(report, builders)
    else:
        out = [build(report) for build in builders]
    from reports.render.op_sections import op_sweep_sections

    out += op_sweep_sections(report.get("op_sweep"))
    return out
