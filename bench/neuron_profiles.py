"""The emulated neuron device's profiles side by side, the differential against cpu, the
compile evidence band, the strict rules' counts, and the fidelity audit, in one run over the
bundled catalog's top N.

Sweeps (the real driver, embedded Ray) the top N on the emulated neuron device once per
profile (TorchNeuron's registrations, the default; torch-mlir; torch-xla) and once on cpu, then
prints, per profile:
- per stage, the models and downloads that passed it, and that passed it with no CPU fallback;
- the 15 missing ops that touch the most downloads, each marked with what the TorchNeuron
  snapshot says of it (registered native, absent, conditional, routed to the CPU, a view) and,
  for compile-only ops, whether its compiler lowers it;
- the headline: architectures behind the top 100 text-generation models that pass every stage;
and the differential: every model that passes every stage on cpu but not on the emulated neuron
device (default profile), with its cause and the cause's evidence (target: zero caused by the
emulator itself, and no failure whose only evidence is an op's absence from upstream
torch-mlir: such an op is `none`, the model passes at most); the band (compile and every stage
with evidence, and at most; also for the top-100 text-generation headline); how many models
each strict rule fails, with one example; the mixtures of experts failing on `_grouped_mm`'s
precondition, run again with TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1 (`--moe-skip`); and the time
the evidence adds to a compile (`--evidence-time N`: the verdicts of N tiny models' AOT graphs,
before (a lookup in one op list, as before issue 17) and after, median and max per model).
`--audit` adds the fidelity audit (runners/devices/neuron/fidelity.py) over tiny models of
distinct families.

    flock /work/cpu.lock .venv/bin/python bench/neuron_profiles.py --top 300 --store /tmp/nb
    .venv/bin/python bench/neuron_profiles.py --audit-only

Runs are named `nb-<device>-<profile>-top<N>`: the same command with the same --store resumes
them (a profile already finished is only read). cpu compiles with --cpu-compile-backend
(default aot_eager: inductor costs ~20 s per model on 2 cores; the neuron side compiles with
its own backend whatever this says).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROFILES = ("torchneuron-2026-04-21", "torch-mlir", "torch-xla")
ALL_STAGES = ("load", "forward", "backward", "compile", "generate")
APPLIES = {"pass"}  # a stage counts as passed when it passed; not applicable is no failure


def run_id(device: str, profile: str | None, top: int) -> str:
    return f"nb-{device}-{profile or 'none'}-top{top}"


def sweep(
    store: Path,
    device: str,
    profile: str | None,
    top: int,
    compile_backend: str | None,
    *,
    models: list[str] | None = None,
    rid: str | None = None,
):
    from runners.settings import DeviceChoice, ModelSettings
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    rid = rid or run_id(device, profile, top)
    start = time.perf_counter()
    summary = run_sweep(
        ModelRun(
            job=JobSettings(store=str(store), run_id=rid, progress=False),
            task=ModelSettings(
                device=DeviceChoice(device, profile=profile), compile_backend=compile_backend
            ),
            top=None if models else top,
            models=tuple(models) if models else None,
        )
    )
    return rid, time.perf_counter() - start, summary


def moe_precondition(store: Path, rid: str, top: int) -> list[str]:
    """The models failing on `_grouped_mm`'s precondition, run again with
    TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1 (the released beta's behaviour is not known)."""
    models, _ = model_table(store, rid)
    hits = [
        mid
        for mid, m in models.items()
        if (row := first_problem(m)) is not None
        and "TorchNeuron's _grouped_mm precondition" in (row["error_message"] or "")
    ]
    if not hits:
        return ["  no model fails on _grouped_mm's precondition"]
    # a fresh driver (and Ray) whose model processes inherit TorchNeuron's variable
    skip_rid = f"{rid}-skip-preconditions"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_NEURONX_SKIP_OP_PRECONDITIONS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "sweep", "run", "--models", ",".join(hits), "--device", "neuron"]
        + ["--store", str(store), "--run-id", skip_rid, "--no-report"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 1):
        return [f"  the run without preconditions failed: {done.stderr[-1500:]}"]
    skipped, _ = model_table(store, skip_rid)
    lines = [f"  {len(hits)} models fail on the precondition; with it skipped:"]
    for mid in sorted(hits, key=lambda m: -models[m]["downloads"]):
        m = skipped.get(mid)
        row = first_problem(m) if m else None
        outcome = (
            "passes every stage"
            if m and passes_all(m)
            else (
                f"{row['stage']}: {row['status']} {(row['error_message'] or '')[:90]}"
                if row
                else "no rows"
            )
        )
        lines.append(f"  {mid:<55} {models[mid]['architecture'] or '?':<28} {outcome}")
    return lines


def evidence_time(n: int) -> list[str]:
    """Per model, the time the neuron backend's verdicts take over its AOT graphs (forward and
    backward of a training step): before (one lookup per node in an op list, and the
    partitions, as the compiler did before issue 17) and after (`check_graph`: the rules, the
    evidence, the partitions). In a fresh
    interpreter; tiny models of the fidelity audit's families, on the CPU (verdicts read node
    metadata only)."""
    code = (
        "import json, statistics, time, torch; torch.set_num_threads(1)\n"
        "from runners.run_model import quiet_libraries; quiet_libraries()\n"
        "from torch._dynamo.backends.common import aot_autograd\n"
        "from model_configs import build\n"
        "from model_configs.resolve import resolve_entry\n"
        "from model_configs.shrink import shrink\n"
        "from model_configs.spec import CatalogEntry\n"
        "from runners.devices.neuron import compiler\n"
        "from runners.devices.neuron.evidence import evidence_sets\n"
        "from runners.devices.neuron.fidelity import AUDIT_MODEL_TYPES\n"
        "sets = evidence_sets(); listed = sets.torch_mlir | sets.registered | sets.tested\n"
        "from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner\n"
        "from torch.fx.passes.operator_support import OperatorSupportBase\n"
        "def lookup(node):\n"
        "    name = compiler._op_name(node)\n"
        "    return name is not None and (name in listed or name.split('.', 1)[0] in listed)\n"
        "class Listed(OperatorSupportBase):\n"
        "    def is_node_supported(self, submodules, node): return lookup(node)\n"
        "def before(gm):\n"
        "    start = time.perf_counter()\n"
        "    for node in gm.graph.nodes: lookup(node)\n"
        "    CapabilityBasedPartitioner(gm, Listed(), allows_single_node_partition=True).propose_partitions()\n"
        "    return time.perf_counter() - start\n"
        "def after(gm):\n"
        "    start = time.perf_counter(); compiler.check_graph(gm); return time.perf_counter() - start\n"
        f"out = {{}}\n"
        f"for t in AUDIT_MODEL_TYPES[:{n}]:\n"
        "    graphs = []\n"
        "    def keep(gm, inputs):\n"
        "        graphs.append(gm); return gm.forward\n"
        "    backend = aot_autograd(fw_compiler=keep, decompositions=compiler.decompositions())\n"
        "    try:\n"
        "        spec = shrink(resolve_entry(CatalogEntry(model_id=t, library='transformers', model_type_hint=t), offline=True))\n"
        "        model = build.build_model(spec); inputs = build.make_inputs(spec, model, purpose='train')\n"
        "        torch._dynamo.reset()\n"
        "        out_ = torch.compile(model, backend=backend)(**inputs)\n"
        "        build.compute_loss(spec, model, out_, inputs).backward()\n"
        "    except Exception as exc:\n"
        "        out[t] = {'error': str(exc)[:100]}; continue\n"
        "    nodes = sum(len(g.graph.nodes) for g in graphs)\n"
        "    out[t] = {'graphs': len(graphs), 'nodes': nodes,\n"
        "              'before': sum(min(before(g) for _ in range(3)) for g in graphs),\n"
        "              'after': sum(min(after(g) for _ in range(3)) for g in graphs)}\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode:
        return [f"  timing failed: {done.stderr[-2000:]}"]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    ok = {t: r for t, r in out.items() if "error" not in r}
    if not ok:
        return [f"  no model compiled: {out}"]
    import statistics

    lines = []
    for key in ("before", "after"):
        values = [r[key] * 1000 for r in ok.values()]
        lines.append(
            f"  {key:<7} median {statistics.median(values):7.2f} ms, max {max(values):7.2f} ms "
            f"per compile ({len(ok)} models, {sum(r['nodes'] for r in ok.values())} graph nodes)"
        )
    slowest = max(ok, key=lambda t: ok[t]["after"])
    lines.append(
        f"  slowest after: {slowest} ({ok[slowest]['nodes']} nodes in {ok[slowest]['graphs']} graphs)"
    )
    failed = [t for t in out if t not in ok]
    if failed:
        lines.append(f"  not compiled here: {', '.join(failed)}")
    return lines


def model_table(store: Path, rid: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """model_id -> {downloads, stages: {stage: row}} and the fallback rows of the run."""
    from reports.store import Store

    results = Store(store).read("results", rid).to_pylist()
    fallbacks = Store(store).read("fallbacks", rid).to_pylist()
    models: dict[str, dict[str, Any]] = {}
    for r in results:
        m = models.setdefault(
            r["model_id"],
            {"downloads": r["downloads"] or 0, "stages": {}, "architecture": r["architecture"]},
        )
        m["stages"][r["stage"]] = r
    return models, fallbacks


def passes_all(m: dict[str, Any]) -> bool:
    rows = m["stages"].values()
    return (
        bool(rows)
        and all(
            r["status"] == "pass" or (r["status"] == "skip" and r["reason"] == "not_applicable")
            for r in rows
        )
        and any(r["status"] == "pass" for r in rows)
    )


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "  n/a"


def stage_table(models: dict[str, dict[str, Any]]) -> list[str]:
    total_models = len(models)
    total_dl = sum(m["downloads"] for m in models.values())
    lines = [
        f"  {'stage':<9} {'passed':>7} {'models':>7} {'downloads':>9}   {'no CPU fallback':>15} "
        f"{'models':>7} {'downloads':>9}"
    ]
    for stage in ALL_STAGES:
        passed = [m for m in models.values() if m["stages"].get(stage, {}).get("status") == "pass"]
        clean = [m for m in passed if not m["stages"][stage]["fallback_op_count"]]
        lines.append(
            f"  {stage:<9} {len(passed):>7} {pct(len(passed), total_models):>7} "
            f"{pct(sum(m['downloads'] for m in passed), total_dl):>9}   {len(clean):>15} "
            f"{pct(len(clean), total_models):>7} {pct(sum(m['downloads'] for m in clean), total_dl):>9}"
        )
    every = [m for m in models.values() if passes_all(m)]
    clean = [
        m
        for m in every
        if not any(r["fallback_op_count"] for r in m["stages"].values() if r["status"] == "pass")
    ]
    lines.append(
        f"  {'all':<9} {len(every):>7} {pct(len(every), total_models):>7} "
        f"{pct(sum(m['downloads'] for m in every), total_dl):>9}   {len(clean):>15} "
        f"{pct(len(clean), total_models):>7} {pct(sum(m['downloads'] for m in clean), total_dl):>9}"
    )
    return lines


def snapshot_says(op: str, sources: list[str]) -> str:
    """What the TorchNeuron snapshot says of an op (and its compiler's evidence)."""
    from runners.devices.neuron.evidence import evidence_sets
    from runners.devices.neuron.profiles import OpClass, load_profile

    profile = load_profile()
    cls = profile.classify(op)
    words = {
        OpClass.NATIVE: "registered native",
        OpClass.VIEW: "a view op",
        OpClass.ROUTED_TO_CPU: "routed to the CPU on purpose",
        OpClass.CONDITIONAL: "conditional",
        OpClass.FALLBACK: "absent (no registration)",
    }
    text = words[cls]
    return f"{text}; compile evidence: {evidence_sets().positive(op)}"


def missing_ops_table(store: Path, rid: str, top: int = 15) -> list[str]:
    from reports.ops import missing_ops
    from reports.query import StoreQuery

    q = StoreQuery(store)
    total = sum(m["downloads"] for m in model_table(store, rid)[0].values())
    lines = [f"  {'op':<58} {'downloads':>9} {'models':>6}  {'rests on':<20} source   snapshot"]
    for r in missing_ops(q, rid, limit=top):
        sources = list(r.get("sources") or []) + (["fails"] if r.get("failing_models") else [])
        sources += ["unverified"] if r.get("unverified_models") else []
        lines.append(
            f"  {r['op']:<58} {pct(r['blocked_downloads'], total):>9} {r['blocked_models']:>6}  "
            f"{r['evidence']:<20} {'/'.join(sources):<8} {snapshot_says(r['op'], sources)}"
        )
    return lines


def band(store: Path, rid: str) -> list[str]:
    """Compile and every stage with evidence, and at most; the headline's band too."""
    from reports.coverage import band as coverage_band
    from reports.coverage import headline as coverage_headline
    from reports.query import StoreQuery

    q = StoreQuery(store)
    b = coverage_band(q, rid)

    def cell(n: int, share: float | None, dl_share: float | None) -> str:
        return f"{n:>5} ({100 * (share or 0):5.1f}%), {100 * (dl_share or 0):5.1f}% dl"

    lines = [f"  {'':<12} {'lowers with evidence':>28}   {'at most':>28}"]
    for line in b["lines"]:
        lines.append(
            f"  {line['line']:<12} "
            f"{cell(line['with_evidence'], line['with_evidence_share'], line['with_evidence_downloads_share']):>28}   "
            f"{cell(line['at_most'], line['at_most_share'], line['at_most_downloads_share']):>28}"
        )
    lines.append(
        f"  unverified: {b['unverified_models']} models pass only unless an op with no "
        "evidence fails"
    )
    h = coverage_headline(q, rid)
    lines.append(
        f"  headline (top {h['top']} {h['task']}): {h['passing_with_evidence']} to {h['passing']} "
        f"of {h['architectures']} architectures pass every stage "
        f"({pct(h['passing_with_evidence'], h['architectures']).strip()} to "
        f"{pct(h['passing'], h['architectures']).strip()})"
    )
    return lines


def headline(store: Path, rid: str) -> str:
    from reports.coverage import headline as coverage_headline
    from reports.query import StoreQuery

    h = coverage_headline(StoreQuery(store), rid)
    misses = [a for a in h["list"] if not a["passes"]]
    text = (
        f"{h['passing']} of the {h['architectures']} architectures behind the top "
        f"{h['top']} {h['task']} models pass every stage ({pct(h['passing'], h['architectures']).strip()}); "
        f"{h['passing_on_device']} with no CPU fallback"
    )
    if misses:
        text += "\n    not passing: " + "; ".join(
            f"{a['architecture']} ({a['first_problem']})" for a in misses
        )
    return text


# ---- differential -----------------------------------------------------------------------


def first_problem(m: dict[str, Any]) -> dict[str, Any] | None:
    for stage in ALL_STAGES:
        r = m["stages"].get(stage)
        if r is None:
            continue
        if r["status"] == "skip" and r["reason"] == "not_applicable":
            continue
        if r["status"] != "pass":
            return r
    return None


# The strict rules of issue 17, by how a failing row shows them.
STRICT_RULES = {
    "host tensor argument": lambda r: r["error_type"] == "HostArgumentError",
    "boolean-mask index_put in compile": lambda r: (
        r["stage"] == "compile"
        and r["failing_op"] == "aten::index_put"
        and "Boolean index_put" in (r["error_message"] or "")
    ),
    "_grouped_mm without offsets": lambda r: "without offs" in (r["error_message"] or ""),
    "_grouped_mm routing offsets (precondition)": lambda r: (
        "per-expert routing offsets" in (r["error_message"] or "")
    ),
}


def cause(row: dict[str, Any]) -> tuple[str, bool]:
    """(cause with its evidence, explained by the device data). Unexplained causes are the
    emulator's."""
    from runners.devices.neuron.profiles import OpClass, load_profile

    profile = load_profile()
    status, error, message = row["status"], row["error_type"] or "", row["error_message"] or ""
    op = row["failing_op"]
    evidence = row.get("compile_evidence")
    if status == "skip":
        if row["reason"] == "device_unsupported_feature":
            return f"unsupported dtype: {message}", True
        return f"skip {row['reason']}", False
    if error == "FallbackDisallowed":
        return f"strict: {op} fell back", True
    if error == "HostArgumentError":
        return f"{message[:120]} (evidence: python_ops/base.py can_handle)", True
    if error in ("UnlowerableOpError", "BackendCompilerFailed") and "cannot be lowered" in message:
        # `none` never fails a compile: only TorchNeuron's code raising (`raises`) does
        return f"compile: {op} cannot be lowered (evidence: {evidence})", evidence == "raises"
    if error == "NoHostKernelError":
        return (
            f"{op} falls back (not registered) and PyTorch has no CPU kernel for it: "
            "TorchNeuron's CPU fallback fails the same way",
            True,
        )
    if "TorchNeuron's _grouped_mm precondition" in message:
        return (
            f"conditional op: {op}: {message.split(' (TorchNeuron')[0][:110]} "
            "(evidence: python_ops/grouped_mm.py validate_offs)",
            True,
        )
    if op and status == "fail":
        cls = profile.classify(op)
        if cls in (OpClass.FALLBACK, OpClass.ROUTED_TO_CPU) and row["stage"] != "compile":
            return (
                f"{op} ({cls.value}) fails on the CPU that runs it: {message[:90]} "
                "(evidence: no registration in the snapshot)",
                True,
            )
    return f"{status} {error}: {message[:140]}" + (f" [op {op}]" if op else ""), False


def strictness(store: Path, rid: str) -> list[str]:
    """How many models each strict rule fails (their first failing stage), one example each."""
    models, _ = model_table(store, rid)
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {rule: [] for rule in STRICT_RULES}
    for mid, m in models.items():
        row = first_problem(m)
        if row is None or row["status"] == "skip":
            continue
        for rule, applies in STRICT_RULES.items():
            if applies(row):
                found[rule].append((mid, row))
    lines = []
    for rule, hits in found.items():
        example = ""
        if hits:
            mid, row = max(hits, key=lambda h: models[h[0]]["downloads"])
            example = (
                f"; e.g. {mid} ({row['architecture']}, {row['stage']}): "
                f"{(row['error_message'] or '')[:110]}"
            )
        families = sorted({models[mid]["architecture"] or "?" for mid, _ in hits})
        lines.append(
            f"  {rule:<44} {len(hits):>4} models"
            + (f" ({', '.join(families[:8])})" if families else "")
            + example
        )
    return lines


def differential(store: Path, neuron_rid: str, cpu_rid: str) -> tuple[list[str], int]:
    neuron, _ = model_table(store, neuron_rid)
    cpu, _ = model_table(store, cpu_rid)
    lines = []
    unexplained = 0
    differ = [
        (mid, neuron[mid])
        for mid, m in cpu.items()
        if passes_all(m) and mid in neuron and not passes_all(neuron[mid])
    ]
    differ.sort(key=lambda item: -item[1]["downloads"])
    only_torch_mlir = 0
    for mid, m in differ:
        row = first_problem(m)
        if row is None:
            continue
        text, explained = cause(row)
        unexplained += not explained
        # a failure resting only on an op's absence from upstream torch-mlir's lists
        only_torch_mlir += row["stage"] == "compile" and row.get("compile_evidence") == "none"
        mark = "" if explained else "  <-- EMULATOR"
        lines.append(f"  {mid:<55} {row['stage']:<8} {text}{mark}")
    header = (
        f"  {len(differ)} models pass every stage on cpu but not on neuron; "
        f"{unexplained} not explained by the device data (target 0); "
        f"{only_torch_mlir} whose only evidence is absence from upstream torch-mlir (target 0)"
    )
    return [header, *lines], unexplained


# ---- fidelity audit -----------------------------------------------------------------------


def audit() -> list[str]:
    """In a fresh interpreter (the emulator installs a backend process-wide)."""
    code = (
        "import json, torch; torch.set_num_threads(1)\n"
        "from runners.run_model import quiet_libraries; quiet_libraries()\n"
        "from runners.devices import get_device\n"
        "from runners.devices.neuron.fidelity import AUDIT_MODEL_TYPES, audit_model_type\n"
        "d = get_device('neuron'); d.setup(); out = {}\n"
        "for t in AUDIT_MODEL_TYPES:\n"
        "    r = audit_model_type(d, t)\n"
        "    out[t] = {'ops': len({a.op for a in r.ops}), 'counts': dict(r.counts()),\n"
        "              'mismatches': r.mismatches, 'failures': r.failures}\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode:
        return [f"  audit failed: {done.stderr[-2000:]}"]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    lines = [
        f"  {'family':<12} {'ops':>4}  {'by class (op x stage)':<62} mismatches  stage failures"
    ]
    total_mismatches = 0
    for family, r in out.items():
        counts = ", ".join(f"{k} {v}" for k, v in sorted(r["counts"].items()))
        total_mismatches += len(r["mismatches"])
        failures = "; ".join(r["failures"])[:80]
        lines.append(
            f"  {family:<12} {r['ops']:>4}  {counts:<62} {len(r['mismatches']):>10}  {failures}"
        )
        lines += [f"      {m}" for m in r["mismatches"][:5]]
    lines.append(f"  {len(out)} families, {total_mismatches} mismatches between device and data")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=300)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--store", default=None, help="keep (and resume) the runs here")
    parser.add_argument("--cpu-compile-backend", default="aot_eager")
    parser.add_argument("--no-cpu", action="store_true", help="skip the cpu run (no differential)")
    parser.add_argument("--audit", action="store_true", help="also run the fidelity audit")
    parser.add_argument("--audit-only", action="store_true")
    parser.add_argument(
        "--moe-skip",
        action="store_true",
        help="run the MoE models failing on _grouped_mm's precondition again without it",
    )
    parser.add_argument(
        "--evidence-time", type=int, default=0, metavar="N", help="time the verdicts of N models"
    )
    args = parser.parse_args()

    if args.evidence_time and args.audit_only:
        print("== time the compile evidence adds")
        print("\n".join(evidence_time(args.evidence_time)))
    if args.audit_only:
        print("fidelity audit (forward + backward, default profile):")
        print("\n".join(audit()))
        return 0
    store = Path(args.store or tempfile.mkdtemp(prefix="hfsweep-nb-"))
    profiles = [p for p in args.profiles.split(",") if p]
    walls: dict[str, float] = {}
    rids: dict[str, str] = {}
    for profile in profiles:
        rid, wall, _ = sweep(store, "neuron", profile, args.top, None)
        rids[profile], walls[profile] = rid, wall
    if not args.no_cpu:
        rid, wall, _ = sweep(store, "cpu", None, args.top, args.cpu_compile_backend)
        rids["cpu"], walls["cpu"] = rid, wall

    print(f"bundled catalog, top {args.top}; store {store}")
    for name, rid in rids.items():
        models, _ = model_table(store, rid)
        print()
        print(f"== {name} (run {rid}, {walls[name]:.0f} s wall, {len(models)} models)")
        print("\n".join(stage_table(models)))
        print(f"  headline: {headline(store, rid)}")
        if name != "cpu":
            print("  compile evidence band:")
            print("\n".join(band(store, rid)))
            print("  strict rules (models whose first failure is the rule's):")
            print("\n".join(strictness(store, rid)))
            print("  top 15 missing ops by downloads touched:")
            print("\n".join(missing_ops_table(store, rid)))
    if "cpu" in rids and profiles:
        print()
        print(
            f"== differential: cpu ({args.cpu_compile_backend} compile) vs neuron ({profiles[0]})"
        )
        lines, _ = differential(store, rids[profiles[0]], rids["cpu"])
        print("\n".join(lines))
    if args.moe_skip and profiles:
        print()
        print(
            "== mixtures of experts: _grouped_mm's precondition, and TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1"
        )
        print("\n".join(moe_precondition(store, rids[profiles[0]], args.top)))
    if args.evidence_time:
        print()
        print("== time the compile evidence adds")
        print("\n".join(evidence_time(args.evidence_time)))
    if args.audit:
        print()
        print("== fidelity audit (forward + backward, default profile)")
        print("\n".join(audit()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
