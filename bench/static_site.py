"""What the static site (`hfsweep report --format html`) weighs and costs to write.

Writes the site of a store's newest run (or of a synthetic store of `--synthetic N` models,
`bench/synthetic_store.py`, two nightly runs) into a temporary folder, `--repeat` times, and
prints the time to write it (run report included, as `hfsweep report` does), its files and
bytes by kind, its largest page, and its size gzipped (what a web server sends):

    python bench/static_site.py --synthetic 1000
    python bench/static_site.py --store hfsweep-store
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reports.query import StoreQuery  # noqa: E402
from reports.render import html_site  # noqa: E402
from reports.summary import run_report  # noqa: E402


def kind_of(path: Path, out: Path) -> str:
    rel = path.relative_to(out)
    return rel.parts[0] + "/" if len(rel.parts) > 1 else rel.name


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", help="a store (default: a synthetic one, --synthetic)")
    p.add_argument("--synthetic", type=int, default=1000, help="models of the synthetic store")
    p.add_argument("--repeat", type=int, default=3, help="times to write the site (fresh each)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="hfsweep-site-") as tmp:
        store = args.store
        if store is None:
            sys.path.insert(0, str(ROOT / "bench"))
            from synthetic_store import generate

            store = str(Path(tmp) / "store")
            generate(store, models=args.synthetic, runs=2, quiet=True)
        times = []
        for i in range(args.repeat):
            out = Path(tmp) / f"site{i}"
            start = time.perf_counter()
            q = StoreQuery(store)  # a fresh process's view: nothing cached
            report = run_report(q)
            files = html_site.write_site(q, report, out)
            times.append(time.perf_counter() - start)
        by_kind: dict[str, list[int]] = {}
        for f in files:
            by_kind.setdefault(kind_of(f, out), []).append(f.stat().st_size)
        total = sum(sum(v) for v in by_kind.values())
        packed = sum(len(gzip.compress(f.read_bytes(), 6)) for f in files)
        largest = max(files, key=lambda f: f.stat().st_size)
        print(f"store {store}, run {report['run_id']}: {report['denominators']['models']} models")
        print(
            f"write time (report + site) over {args.repeat} runs: median "
            f"{statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s"
        )
        print(f"{len(files)} files, {total / 1e6:.2f} MB ({packed / 1e6:.2f} MB gzipped)")
        for kind, sizes in sorted(by_kind.items(), key=lambda kv: -sum(kv[1])):
            print(
                f"  {kind:<14} {len(sizes):>6} files {sum(sizes) / 1e6:>8.2f} MB"
                f"  median {statistics.median(sizes) / 1e3:>7.1f} kB"
            )
        print(f"largest file: {largest.relative_to(out)} ({largest.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
