"""Merged pairs run alike: catalog entries whose tiny models differed before the canonical form
(`Adapter.canonical`) and are one task after it, each run as its own library shrinks it (its raw
tiny config, before the canonical form) on the emulated neuron device. For every pair, the
stages' statuses, the ops that fell back to the CPU in each stage and the failing ops must be
identical: then the fields the canonical form sets change no op, as `canonical_fields` claims.

Pairs come from catalogs, a synthetic one (`bench/synthetic_catalog.py`: fine-tunes with their
own heads, labels and stored dtype) and the bundled top 1,000; and from real configs:
- `--real`: the sentence-transformers stack (Transformer, mean Pooling, Normalize) over each
  published backbone of `bench/data/model_families.json` (BERT, RoBERTa, XLM-R, ...), whose tiny
  stacks held their backbone's full-size values before; a stack's raw tiny config is taken as it
  was before that fix (the backbone's `changes` inside), so that the pairs the fix merges show;
- `--tokens`: published decoder configs (Llama 2, TinyLlama, Mistral) with their own special
  token ids, each with its pad token set the two ways fine-tunes set it (the unknown token, or a
  token added after the vocabulary): catalogs rarely hold two tiny models that differ only in
  token id values.
Pairs are picked round-robin over (source, what differs in the pair), so that each canonical
field is exercised.

    python bench/synthetic_catalog.py --out /tmp/synth --entries 3000
    python bench/key_pairs.py --catalog /tmp/synth/catalog.csv --catalog bundled --real --tokens \
        --pairs 38 --out /tmp/pairs.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass
class Member:
    catalog: str
    model_id: str
    raw: Any  # TinySpec as the adapter shrinks it
    canonical: Any  # TinySpec after Adapter.canonical


def differs(a: Any, b: Any) -> tuple[str, ...]:
    """The leaf keys where two raw tiny configs differ (`changes` of an embedded backbone
    counted as one key)."""
    from model_configs.libraries.transformers.shrink import _flatten

    fa, fb = _flatten(a.config), _flatten(b.config)
    keys = {k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)}
    names = {
        ("backbone.changes" if ".changes." in f".{k}." else k.rsplit(".", 1)[-1]) for k in keys
    }
    return tuple(sorted(names))


def legacy(spec: Any) -> Any:
    """A sentence-transformers stack's tiny spec as it was before its key fix: the backbone's
    `changes` (full-size values) inside the stack's config. Other specs as they are."""
    from dataclasses import replace

    if spec.library != "sentence-transformers":
        return spec
    changes = {
        k[len("backbone.") :]: v for k, v in spec.changes.items() if k.startswith("backbone.")
    }
    backbone = {**spec.config["backbone"], "changes": changes}
    return replace(spec, config={**spec.config, "backbone": backbone})


ST_BACKBONES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "deberta-v2",
    "electra",
    "modernbert",
)


def real_stacks() -> list[Member]:
    """The sentence-transformers default stack over each published backbone variant."""
    from transformers import AutoConfig

    from model_configs.libraries import get_adapter
    from model_configs.spec import ResolvedConfig

    families = json.loads((ROOT / "bench" / "data" / "model_families.json").read_text())
    adapter = get_adapter("sentence-transformers")
    stack = [
        {"type": "Transformer", "path": "", "config": {"max_seq_length": 512}},
        {"type": "Pooling", "path": "1_Pooling", "config": {"pooling_mode": "mean"}},
        {"type": "Normalize", "path": "2_Normalize", "config": {}},
    ]
    out = []
    for model_type in ST_BACKBONES:
        for variant in families["families"][model_type]["variants"]:
            config = AutoConfig.for_model(model_type).to_dict()
            config.update({k: v for k, v in variant.items() if k != "from"})
            resolved = ResolvedConfig(
                model_id=variant["from"],
                library="sentence-transformers",
                config={"modules": stack, "backbone": config},
                source="hub",
            )
            try:
                raw = adapter.shrink(resolved)
            except Exception:
                continue
            out.append(Member("real", variant["from"], legacy(raw), adapter.canonical(raw)))
    return out


# (variant, architecture, its own token ids, the pad token one way, the other way): the pad
# as fine-tunes set it, the unknown token (0) or a token added after the vocabulary
TOKEN_PAIRS = (
    ("llama", "meta-llama/Llama-2-7b-hf", "LlamaForSequenceClassification",
     {"bos_token_id": 1, "eos_token_id": 2}, {"pad_token_id": 0},
     {"pad_token_id": 32000, "vocab_size": 32001}),
    ("llama", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "LlamaForCausalLM",
     {"bos_token_id": 1, "eos_token_id": 2}, {"pad_token_id": 0},
     {"pad_token_id": 32000, "vocab_size": 32001}),
    ("mistral", "mistralai/Mistral-7B-v0.1", "MistralForSequenceClassification",
     {"bos_token_id": 1, "eos_token_id": 2}, {"pad_token_id": 0},
     {"pad_token_id": 32000, "vocab_size": 32001}),
    ("mistral", "mistralai/Mistral-7B-Instruct-v0.3", "MistralForCausalLM",
     {"bos_token_id": 1, "eos_token_id": 2}, {"pad_token_id": 0},
     {"pad_token_id": 32768, "vocab_size": 32769}),
)  # fmt: skip


def token_members() -> list[Member]:
    """Each `TOKEN_PAIRS` variant twice, its pad token set each way."""
    from transformers import AutoConfig

    from model_configs.libraries import get_adapter
    from model_configs.spec import ResolvedConfig

    families = json.loads((ROOT / "bench" / "data" / "model_families.json").read_text())
    adapter = get_adapter("transformers")
    out = []
    for model_type, name, arch, ids, *pads in TOKEN_PAIRS:
        variant = next(v for v in families["families"][model_type]["variants"] if v["from"] == name)
        for i, pad in enumerate(pads):
            config = AutoConfig.for_model(model_type).to_dict()
            config.update({k: v for k, v in variant.items() if k != "from"})
            config.update({**ids, **pad})
            resolved = ResolvedConfig(f"{name}-pad{i}", "transformers", config, "hub")
            raw = adapter.shrink(resolved, architecture_hint=arch)
            out.append(Member("tokens", resolved.model_id, raw, adapter.canonical(raw)))
    return out


def members(catalog: str, limit: int | None) -> list[Member]:
    """Each entry of `catalog` that shrinks, with its raw and canonical tiny spec."""
    from model_configs import guards
    from model_configs.catalog import load_catalog
    from model_configs.libraries import get_adapter
    from model_configs.resolve import resolve_entry
    from runners.run_model import quiet_libraries

    quiet_libraries()
    cat = load_catalog(catalog)
    out = []
    for entry in cat.entries[:limit]:
        try:
            resolved = resolve_entry(entry, config_dir=cat.config_dir)
            for config in (resolved.config, *resolved.components.values()):
                guards.check_shape(config, model_id=entry.model_id)
            adapter = get_adapter(resolved.library)
            adapter.require_package(entry.model_id)
            arch = entry.architectures_hint[0] if entry.architectures_hint else None
            raw = adapter.shrink(resolved, architecture_hint=arch, pipeline_tag=entry.pipeline_tag)
            out.append(Member(cat.name, entry.model_id, legacy(raw), adapter.canonical(raw)))
        except Exception:  # a skip or a shrink failure: not a task, no pair
            continue
    return out


def merged_pairs(found: list[Member]) -> list[tuple[tuple[str, ...], Member, Member]]:
    """Per canonical task, its members whose raw tiny models differ: one pair per distinct
    (what differs) in the group, each as (what differs, a, b)."""
    groups: dict[str, list[Member]] = defaultdict(list)
    for m in found:
        groups[m.canonical.hash].append(m)
    pairs = []
    for group in groups.values():
        seen_raw: dict[str, Member] = {}
        for m in group:
            seen_raw.setdefault(m.raw.hash, m)
        distinct = list(seen_raw.values())
        first = distinct[0]
        kinds: set[tuple[str, ...]] = set()
        for other in distinct[1:]:
            what = differs(first.raw, other.raw)
            if what not in kinds:
                kinds.add(what)
                pairs.append((what, first, other))
    return pairs


def pick(pairs: list[tuple[tuple[str, ...], Member, Member]], n: int) -> list[Any]:
    """`n` pairs round-robin over (catalog, what differs), a model type at most twice."""
    buckets: dict[tuple[str, tuple[str, ...]], list[Any]] = defaultdict(list)
    for p in pairs:
        buckets[(p[1].catalog, p[0])].append(p)
    chosen: list[Any] = []
    per_type: dict[str, int] = defaultdict(int)
    while len(chosen) < n and any(buckets.values()):
        for key in sorted(buckets):
            queue = buckets[key]
            while queue:
                p = queue.pop(0)
                mt = f"{p[1].raw.library}:{p[1].raw.model_type}"
                if per_type[mt] < 2:
                    per_type[mt] += 1
                    chosen.append(p)
                    break
            if len(chosen) >= n:
                break
    return chosen


def summary(outcome: Any) -> dict[str, Any]:
    """What a pair must share: per stage, its status, the ops that fell back, the failing op."""
    return {
        r.stage: {
            "status": r.status,
            "fallbacks": sorted({f["op"] for f in r.fallbacks}),
            "failing_op": r.failing_op,
        }
        for r in outcome.stages
    }


def run(spec: Any, settings: Any) -> dict[str, Any]:
    from runners.isolation import run_isolated

    return summary(run_isolated(spec, settings))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", action="append", default=[], help="repeat: path or bundled")
    parser.add_argument(
        "--real", action="store_true", help="also sentence-transformers stacks over real backbones"
    )
    parser.add_argument(
        "--tokens", action="store_true", help="also decoders with their pad token set two ways"
    )
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--limit", type=int, default=None, help="entries read per catalog")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model")
    parser.add_argument("--out", type=Path, default=None, help="write the pairs' results (JSON)")
    args = parser.parse_args()

    from runners.settings import DeviceChoice, ModelSettings

    start = time.perf_counter()
    pairs: list[Any] = []
    sources = [
        *args.catalog,
        *(["real"] if args.real else []),
        *(["tokens"] if args.tokens else []),
    ]
    for catalog in sources:
        if catalog == "real":
            found = real_stacks()
        elif catalog == "tokens":
            found = token_members()
        else:
            found = members(catalog, args.limit)
        merged = merged_pairs(found)
        tasks_raw = len({m.raw.hash for m in found})
        tasks = len({m.canonical.hash for m in found})
        print(
            f"{catalog}: {len(found)} entries shrink; unique tiny models {tasks_raw} raw, "
            f"{tasks} canonical; {len(merged)} merged pairs",
            flush=True,
        )
        pairs += merged
    chosen = pick(pairs, args.pairs)
    print(
        f"planned in {time.perf_counter() - start:.0f} s; running {len(chosen)} pairs", flush=True
    )
    settings = ModelSettings(device=DeviceChoice("neuron"), timeout_s=args.timeout)
    device = settings.device.build()
    print(f"device: {device.name} ({'emulated' if device.emulated else 'real'})", flush=True)
    results, same = [], 0
    for i, (what, a, b) in enumerate(chosen, 1):
        ra, rb = run(a.raw, settings), run(b.raw, settings)
        equal = ra == rb
        same += equal
        statuses = " ".join(f"{s}:{v['status']}" for s, v in ra.items())
        fallbacks = sorted({op for v in ra.values() for op in v["fallbacks"]})
        print(
            f"[{i:2d}] {'same' if equal else 'DIFFER'}  {a.raw.library}:{a.raw.model_type} "
            f"({a.catalog}) {a.model_id} ~ {b.model_id}; differs in {', '.join(what)}; "
            f"{statuses}; fallbacks {len(fallbacks)}",
            flush=True,
        )
        if not equal:
            for stage in ra:
                if ra[stage] != rb.get(stage):
                    print(f"      {stage}: {ra[stage]} vs {rb.get(stage)}", flush=True)
        results.append(
            {
                "what": what,
                "a": a.model_id,
                "b": b.model_id,
                "catalog": a.catalog,
                "library": a.raw.library,
                "model_type": a.raw.model_type,
                "equal": equal,
                "a_result": ra,
                "b_result": rb,
            }  # fmt: skip
        )
    print(
        f"{same} of {len(chosen)} merged pairs identical (statuses, fallback op sets, failing "
        f"ops per stage) on the {'emulated ' if device.emulated else ''}{device.name} device; "
        f"{time.perf_counter() - start:.0f} s",
        flush=True,
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0 if same == len(chosen) else 1


if __name__ == "__main__":
    raise SystemExit(main())
