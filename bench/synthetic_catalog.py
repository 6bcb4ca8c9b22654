"""A synthetic Hub catalog at any size, with the config files a `catalog refresh` would cache.

Every entry starts from a row of the bundled top 1,000 drawn at random, so libraries, tasks,
model types, remote code, unsupported libraries and quantized checkpoints come in the real top
1,000's proportions:
- a transformers row of a family in `bench/data/model_families.json` (real families with their
  real size variants: layer counts, widths, heads and KV heads, vocabularies, MoE experts, rope
  settings, sliding windows) gets a config.json of its own: a variant of its family (the
  popular ones more often), either as published or as a fine-tune (its own head, labels, added
  tokens, dtype, `_name_or_path`, the transformers version that saved it), written where
  `catalog refresh` writes it (`<catalog>/<org>/<name>/config.json`), so it resolves as a Hub
  config (`config_source=hub`);
- any other row is copied under a new organisation with its repo name kept (timm, open_clip and
  Chronos read the architecture from it) and resolves as the bundled row does (the library's
  defaults; pyannote and SpeechBrain map exact repo ids, so their copies are `no_config` skips);
- downloads follow the real top 1,000's, continued past rank 1,000 by the power law fitted to
  its ranks 100-1,000.

    python bench/synthetic_catalog.py --out /tmp/synth --entries 100000
    python bench/synthetic_catalog.py --out /tmp/synth --entries 2000 --plan 2000  # dedup
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAMILIES = json.loads((ROOT / "bench" / "data" / "model_families.json").read_text())["families"]
QUANTIZED_TAGS = {"awq", "gptq", "fp8", "gguf", "mlx", "bitsandbytes", "compressed-tensors"}
SAVED_BY = ["4.38.2", "4.41.2", "4.44.2", "4.46.3", "4.48.0", "4.51.3", "4.53.1", "4.57.1"]
LABELS = [2, 2, 2, 2, 3, 3, 5, 6, 7, 9, 20]  # num_labels of classification fine-tunes
CTC_VOCAB = [32, 33, 34, 36, 40, 48, 58, 64]


def fitted_downloads(real: list[int], n: int) -> list[int]:
    """The real top 1,000's downloads, continued by a power law fitted to ranks 100-1,000."""
    ranks = np.arange(100, len(real) + 1)
    values = np.maximum(np.array(real[99:], dtype=float), 1.0)
    slope, intercept = np.polyfit(np.log(ranks), np.log(values), 1)
    tail = [int(math.exp(intercept + slope * math.log(r))) for r in range(len(real) + 1, n + 1)]
    return (real + tail)[:n]


class Generator:
    def __init__(self, seed: int, *, name_or_path_share: float = 0.5):
        from model_configs.catalog import load_catalog

        self.rng = np.random.default_rng(seed)
        self.real = list(load_catalog("bundled").entries)
        self.name_or_path_share = name_or_path_share
        self._defaults: dict[str, dict[str, Any]] = {}

    def default(self, model_type: str) -> dict[str, Any]:
        if model_type not in self._defaults:
            from transformers import AutoConfig

            cfg = AutoConfig.for_model(model_type).to_dict()
            for key in ("_name_or_path", "transformers_version", "dtype", "torch_dtype"):
                cfg.pop(key, None)
            self._defaults[model_type] = cfg
        return self._defaults[model_type]

    def pick(self, weighted: list[list[Any]]) -> Any:
        weights = np.array([w for _, w in weighted], dtype=float)
        return weighted[int(self.rng.choice(len(weighted), p=weights / weights.sum()))][0]

    def variant(self, family: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A variant of the family, the first (most popular) ones more often (Zipf, s=1.1)."""
        n = len(family["variants"])
        weights = 1.0 / np.arange(1, n + 1) ** 1.1
        k = int(self.rng.choice(n, p=weights / weights.sum()))
        return k, family["variants"][k]

    def config(self, model_type: str, family: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """A config.json of the family: a variant as published, or one of its fine-tunes."""
        rng = self.rng
        k, variant = self.variant(family)
        cfg = copy.deepcopy(self.default(model_type))
        cfg.update({key: v for key, v in variant.items() if key != "from"})
        cfg["model_type"] = model_type
        published = rng.random() < 0.3
        arch = family["architectures"][0][0] if published else self.pick(family["architectures"])
        cfg["architectures"] = [arch]
        if not published:
            if "labels" in family["finetune"] and arch.endswith(
                ("SequenceClassification", "TokenClassification", "ImageClassification")
            ):
                n = int(rng.choice(LABELS))
                names = [f"LABEL_{i}" for i in range(n)]
                if rng.random() < 0.4:
                    names = [f"class_{int(rng.integers(1000))}_{i}" for i in range(n)]
                cfg["id2label"] = {str(i): name for i, name in enumerate(names)}
                cfg["label2id"] = {name: i for i, name in enumerate(names)}
            if "vocab" in family["finetune"] and rng.random() < 0.3:
                cfg["vocab_size"] = int(cfg["vocab_size"]) + int(rng.choice([1, 2, 8, 256]))
            if "ctc_vocab" in family["finetune"] and arch.endswith("CTC"):
                cfg["vocab_size"] = int(rng.choice(CTC_VOCAB))
            if rng.random() < self.name_or_path_share:
                cfg["_name_or_path"] = (
                    variant["from"]
                    if rng.random() < 0.6
                    else f"/home/user{int(rng.integers(500))}/checkpoints/checkpoint-"
                    f"{int(rng.integers(1, 20)) * 500}"
                )
        decoder = arch.endswith("CausalLM")
        cfg["torch_dtype"] = (
            str(rng.choice(["bfloat16", "bfloat16", "float16", "float32"]))
            if decoder
            else str(rng.choice(["float32", "float32", "float32", "float16"]))
        )
        cfg["transformers_version"] = str(rng.choice(SAVED_BY))
        name = variant["from"].split("/")[-1] + ("" if published else "-ft")
        return cfg, name

    def entries(self, n: int, config_dir: Path) -> tuple[list[Any], Counter]:
        from dataclasses import replace

        from model_configs.spec import CatalogEntry

        downloads = fitted_downloads([e.downloads or 0 for e in self.real], n)
        kinds: Counter = Counter()
        out = []
        for i in range(n):
            row = self.real[int(self.rng.integers(len(self.real)))]
            family = FAMILIES.get(row.model_type_hint or "")
            quantized = bool(QUANTIZED_TAGS & set(row.tags))
            if (
                row.library == "transformers"
                and family
                and not row.custom_code
                and not quantized
                and row.model_type_hint
            ):
                cfg, name = self.config(row.model_type_hint, family)
                org = f"user{int(self.rng.zipf(1.3)) % 20000}"
                model_id = f"{org}/{name}-{i:06d}"
                folder = config_dir / org / f"{name}-{i:06d}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
                out.append(
                    CatalogEntry(
                        model_id=model_id,
                        rank=i + 1,
                        downloads=downloads[i],
                        pipeline_tag=row.pipeline_tag,
                        library="transformers",
                        model_type_hint=row.model_type_hint,
                        architectures_hint=tuple(cfg["architectures"]),
                        tags=("transformers", "safetensors", row.model_type_hint),
                    )
                )
                kinds["config.json of a family"] += 1
            else:
                org, _, name = row.model_id.rpartition("/")
                out.append(
                    replace(
                        row,
                        model_id=f"{org or 'hub'}-m{i:06d}/{name}",
                        rank=i + 1,
                        downloads=downloads[i],
                    )
                )
                kinds[f"copy of a bundled row ({row.library or 'no library'})"] += 1
        return out, kinds


def generate(out: Path, n: int, seed: int = 0, *, name_or_path_share: float = 0.5) -> dict:
    """Write `out/catalog.csv` and its configs folder `out/catalog/`; returns what it wrote."""
    from model_configs.catalog import write_catalog

    start = time.perf_counter()
    gen = Generator(seed, name_or_path_share=name_or_path_share)
    csv_path = out / "catalog.csv"
    entries, kinds = gen.entries(n, csv_path.with_suffix(""))
    write_catalog(entries, csv_path)
    files = list(csv_path.with_suffix("").rglob("config.json"))
    return {
        "catalog": str(csv_path),
        "entries": n,
        "config_files": len(files),
        "config_bytes": sum(f.stat().st_size for f in files),
        "kinds": dict(kinds.most_common()),
        "seconds": time.perf_counter() - start,
    }


def group_sizes(hashes: list[str]) -> dict[int, int]:
    """How many dedup groups have each size (1: a model alone with its tiny config)."""
    return dict(sorted(Counter(Counter(hashes).values()).items()))


def plan_sample(catalog: str, n: int) -> dict[str, Any]:
    """Plan the first `n` entries in this process: what dedup makes of them."""
    from ground.schema import Stage
    from model_configs.catalog import load_catalog
    from sweep.plan import plan_entries

    cat = load_catalog(catalog)
    start = time.perf_counter()
    planned = plan_entries(cat.top(n), list(Stage), config_dir=cat.config_dir)
    seconds = time.perf_counter() - start
    shrunk = [p.spec.hash for p in planned if p.spec is not None]
    original = [p.config_hash or "" for p in planned if p.spec is not None]
    decided = Counter(
        (p.outcome.stages[0].reason or p.outcome.stages[0].status) for p in planned if p.outcome
    )
    return {
        "catalog": catalog,
        "entries": n,
        "plan_s": seconds,
        "ms_per_entry": 1000 * seconds / max(1, n),
        "planned": len(shrunk),
        "unique_original": len(set(original)),
        "unique_tiny": len(set(shrunk)),
        "dedup_ratio": len(set(shrunk)) / max(1, len(shrunk)),
        "tiny_group_sizes": group_sizes(shrunk),
        "decided_at_planning": dict(decided.most_common()),
        "config_sources": dict(Counter(p.config_source for p in planned).most_common()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for catalog.csv and its configs")
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--name-or-path-share",
        type=float,
        default=0.5,
        help="share of fine-tunes whose config keeps the `_name_or_path` they were saved from",
    )
    parser.add_argument(
        "--plan",
        type=int,
        default=0,
        help="then plan the first N entries here, and the bundled top N beside them",
    )
    args = parser.parse_args()
    out = Path(args.out)
    if not (out / "catalog.csv").exists():
        print(
            json.dumps(
                generate(out, args.entries, args.seed, name_or_path_share=args.name_or_path_share),
                indent=1,
            )
        )
    if args.plan:
        for catalog in (str(out / "catalog.csv"), "bundled"):
            print(json.dumps(plan_sample(catalog, args.plan), indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
