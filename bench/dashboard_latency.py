"""Dashboard latency against the real server on synthetic stores of 1M and 10M result rows.

For each size: generate the store (100,000 models per nightly run, 5 stages each, so 2 runs make
1M rows and 20 runs 10M), start `hfsweep dashboard` in its own process, wait until it is up, time
the first overview (cold: it summarises every run), then time, one request at a time:
the overview page, the models table with a filter (filters and pages vary), the model page of
random models, the JSON lookup of a model, and the ops page. Prints p50 / p95 per page against
the targets (1M: pages p95 < 150 ms, lookup < 50 ms; 10M: < 400 ms and < 100 ms).

    python bench/dashboard_latency.py                 # both sizes
    python bench/dashboard_latency.py --sizes 1m --requests 50
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import duckdb
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from synthetic_store import generate  # noqa: E402

MODELS_PER_RUN = 100_000
SIZES = {"1m": 1_000_000, "10m": 10_000_000}
TARGETS = {  # p95 ms: (pages, model lookup)
    "1m": (150.0, 50.0),
    "10m": (400.0, 100.0),
}
FILTERS = [
    {"task": "text-generation", "outcome": "failed"},
    {"library": "transformers", "stage": "compile", "status": "fail"},
    {"search": "llama", "outcome": "passed"},
    {"model_type": "bert", "sort": "model_id", "order": "asc"},
    {"outcome": "with_fallback", "sort": "fallback_ops"},
    {"task": "text-to-image", "status": "skip"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def sample_models(store: str, n: int, seed: int) -> list[str]:
    files = sorted(str(p) for p in Path(store, "results").glob("run_id=*/*.parquet"))
    con = duckdb.connect()
    query = "SELECT DISTINCT model_id FROM read_parquet($files)"
    ids = [r[0] for r in con.execute(query, {"files": files[-10:]}).fetchall()]
    rng = random.Random(seed)
    return rng.sample(ids, min(n, len(ids)))


def model_path(model_id: str) -> str:
    return "/".join(quote(part, safe="") for part in model_id.split("/", 1))


def timed(client: httpx.Client, url: str) -> float:
    t0 = time.perf_counter()
    r = client.get(url)
    dt = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:200]}")
    return dt


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


def bench_size(label: str, rows: int, workdir: Path, requests: int, seed: int) -> list[tuple]:
    runs = rows // (MODELS_PER_RUN * 5)
    store = str(workdir / f"store-{label}")
    t0 = time.perf_counter()
    if not Path(store, "runs").exists():
        totals = generate(store, models=MODELS_PER_RUN, runs=runs, seed=seed, quiet=True)
    else:
        fb_files = [str(p) for p in Path(store, "fallbacks").glob("run_id=*/*.parquet")]
        n_fb = duckdb.connect().execute("SELECT count(*) FROM read_parquet($f)", {"f": fb_files})
        totals = {"results": rows, "fallbacks": int(n_fb.fetchall()[0][0]), "runs": runs}
    gen_s = time.perf_counter() - t0
    size_mb = sum(p.stat().st_size for p in Path(store).rglob("*.parquet")) / 1e6
    n_files = sum(1 for _ in Path(store).rglob("*.parquet"))
    print(
        f"\n[{label}] store: {totals['results']:,} result rows, {totals['fallbacks']:,} "
        f"fallback rows, {runs} runs, {n_files} part files, {size_mb:.0f} MB on disk "
        f"(generated in {gen_s:.1f} s)",
        flush=True,
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", "dashboard", "--store", store, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    results = []
    try:
        t_start = time.perf_counter()
        with httpx.Client(timeout=600) as client:
            while True:
                try:
                    client.get(base + "/api/health")
                    break
                except httpx.TransportError:
                    if proc.poll() is not None:
                        raise RuntimeError(proc.stderr.read() if proc.stderr else "died") from None
                    time.sleep(0.05)
            up_s = time.perf_counter() - t_start
            cold = timed(client, base + "/")
            first_s = time.perf_counter() - t_start
            while client.get(base + "/api/health").json().get("warming"):
                time.sleep(0.1)
            warm_s = time.perf_counter() - t_start
            print(
                f"[{label}] server up in {up_s:.2f} s; first overview {cold:.0f} ms "
                f"({first_s:.1f} s after start: the newest run summarised); every run "
                f"summarised {warm_s:.1f} s after start; timing from then on",
                flush=True,
            )
            models = sample_models(store, requests * 2, seed)
            rng = random.Random(seed)
            cases: dict[str, list[str]] = {
                "overview /": [base + "/"] * requests,
                "models table + filter": [
                    base
                    + "/models?"
                    + urlencode({**rng.choice(FILTERS), "page": rng.randint(1, 5)})
                    for _ in range(requests)
                ],
                "model page /models/{id}": [
                    base + "/models/" + model_path(m) for m in models[:requests]
                ],
                "model lookup /api/models/{id}": [
                    base + "/api/models/" + model_path(m) for m in models[requests:]
                ],
                "ops page /ops": [base + "/ops"] * requests,
            }
            first_seen: dict[str, float] = {}
            for name, urls in cases.items():
                first_seen[name] = timed(client, urls[0])  # first of its kind (caches)
            for name, urls in cases.items():
                times = [timed(client, u) for u in urls]
                page_t, lookup_t = TARGETS[label]
                target = lookup_t if "model" in name and "table" not in name else page_t
                results.append(
                    (
                        label,
                        name,
                        len(times),
                        statistics.median(times),
                        pct(times, 0.95),
                        target,
                        first_seen[name],
                    )
                )
            mem = rss_mb(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"[{label}] server RSS after the run: {mem:.0f} MB", flush=True)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1m,10m", help="comma-separated: 1m, 10m")
    p.add_argument("--requests", type=int, default=100, help="timed requests per page")
    p.add_argument("--dir", help="where stores go (default: a temporary folder, removed after)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="hfsweep-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; "
        f"duckdb {duckdb.__version__}"
    )
    rows_out = []
    try:
        for label in args.sizes.split(","):
            rows_out += bench_size(label, SIZES[label], workdir, args.requests, args.seed)
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        "\nrows        page                              n   p50 ms   p95 ms  target p95  "
        "p95/target  first ms"
    )
    for label, name, n, p50, p95, target, first in rows_out:
        print(
            f"{SIZES[label]:>10,}  {name:<32}{n:>4}{p50:>9.1f}{p95:>9.1f}{target:>12.0f}"
            f"{p95 / target:>12.2f}{first:>10.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
