"""Share of the bundled top 1,000's downloads skipped as `unsupported_library`, before and after
the library adapters, from planning alone (resolve + shrink, no model runs).

Planning decides every skip of the library axis: a library no adapter takes
(`unsupported_library`), an adapter whose package is missing (`missing_package`), no config
offline (`no_config`), remote code. "Before" is the rule the sweep had before the adapter
registry, re-stated here: only transformers, sentence-transformers and diffusers repos, or
repos with no library whose tags name a transformers model type. "After" is `sweep.plan`'s
`plan_entry` on every entry (the adapters this environment has installed).

    .venv/bin/python bench/library_skips.py [--top 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BEFORE_LIBRARIES = {"transformers", "sentence-transformers", "diffusers"}


def before_unsupported(entry: object) -> bool:
    e = entry  # the pre-registry rule (model_configs/resolve.py before the adapters)
    if e.custom_code:  # type: ignore[attr-defined]
        return False  # remote_code is checked first
    if e.library:  # type: ignore[attr-defined]
        return e.library not in BEFORE_LIBRARIES  # type: ignore[attr-defined]
    return not e.model_type_hint  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=1000)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ground.schema import Stage
    from model_configs.catalog import load_catalog
    from sweep.plan import plan_entries

    entries = load_catalog("bundled").top(args.top)
    total = sum(e.downloads or 0 for e in entries)
    before = sum(e.downloads or 0 for e in entries if before_unsupported(e))
    start = time.perf_counter()
    planned = plan_entries(entries, [Stage.LOAD])
    seconds = time.perf_counter() - start
    outcome: Counter[str] = Counter()
    by_library: dict[str, Counter[str]] = defaultdict(Counter)
    for p in planned:
        if p.outcome is None:
            key = "planned (runs)"
        else:
            first = p.outcome.stages[0]
            key = f"{first.status}:{first.reason}" if first.reason else first.status
        outcome[key] += p.entry.downloads or 0
        lib = p.entry.library or (p.resolved.library if p.resolved else "(none)")
        by_library[lib][key] += p.entry.downloads or 0
    after = outcome.get("skip:unsupported_library", 0)
    print(f"entries: {len(entries)}  downloads: {total:,}  planning: {seconds:.0f} s")
    print(f"unsupported_library, share of downloads: before {before / total:.1%}  "
          f"after {after / total:.1%}  (target <= 8%)")  # fmt: skip
    print("\nafter, every planning outcome by share of downloads:")
    for key, dl in outcome.most_common():
        print(f"  {key:<32} {dl / total:6.2%}")
    print("\nthe libraries behind the rest of the downloads:")
    for lib in ("timm", "pyannote-audio", "chronos-forecasting", "diffusion-single-file",
                "ultralytics", "speechbrain", "open_clip", "sentence-transformers"):  # fmt: skip
        counts = by_library.get(lib, Counter())
        parts = ", ".join(f"{k} {v / total:.2%}" for k, v in counts.most_common())
        print(f"  {lib:<24} {parts}")
    chronos_untagged = [
        p for p in planned if not p.entry.library and p.resolved and
        p.resolved.library == "chronos-forecasting"
    ]  # fmt: skip
    print(f"  (chronos repos without a library tag, claimed by name: {len(chronos_untagged)}, "
          f"{sum(p.entry.downloads or 0 for p in chronos_untagged) / total:.2%})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
