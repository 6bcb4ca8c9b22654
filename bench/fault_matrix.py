"""The fault matrix: every fault type, many trials each, on real sweeps; what survived.

Sections (default: all; `--fast`: all but `ops-env` and `ops-kill`):
  model  one sweep on an embedded Ray (2 CPUs, a driver in a subprocess, as `hfsweep run`):
         `--trials` models per fault type, each with its own config (no two share a task) and
         its own fault, injected through the test-only hook (`runners/faults.py`) and matched
         by its shrunk config's hash, beside as many healthy models; then, the run's parts of
         no rows in two tables truncated to 100 bytes, the same command again (nothing to
         do, nothing doubled, the parts put aside and pyarrow reading every table)
  node   a real two-node cluster on loopback (token auth): during one sweep the worker node is
         killed (SIGKILL of every process of its `ray start`) whenever it holds a model task,
         and started again, `--trials` times (each model waits in its load stage until the
         bench releases it or kills its node: what runs where is seen, never raced)
  env    `--trials` sweeps (`--local`) where the environment keeps failing for one model (its
         device does not set up): no row for it, exit 3 naming it, then the same command
         without the fault writes its rows
  kill   one run (embedded Ray) whose driver is first stopped with SIGTERM mid-run (it must
         stop as on Ctrl-C: exit 143, one line saying how to resume, no stack from Ray, the run
         `interrupted`), then killed with SIGKILL at a random moment, `--kills` times, each
         time resumed with the same run id, then finished (its last model waits until the
         kills are done, so that no kill comes after the run's end). With `--fast` (CI): one
         CPU, six models; the SIGTERM while the second model waits, the one SIGKILL at an
         explicit point (the last model waiting, rows in the store: it has no row, the run
         stays `running`), then finished (`finished`, every row once)
  ops    the same faults inside op-sweep tasks (`hfsweep ops`, embedded Ray, 2 CPUs): per
         round, one OpInfo per fault type, its first sample faulted (matched by its name),
         beside a healthy one; `--trials` rounds, each run twice (the rerun does nothing)
  ops-env   as `env`, for op-sweep tasks (`--local`): no row (never `crash`), exit 3
  ops-kill  as `kill`, for one op run (`--kills` times; its last OpInfo waits likewise)
  group  one sweep (embedded Ray, 2 CPUs) of load, forward, backward and ddp on the emulated
         neuron device: `--trials` models per fault in rank 1 of the ddp stage's warm group
         (the rank killed: retried, no row; the rank raising inside the all-reduce its peer
         waits in: `fail`; the rank past its memory budget: `oom`; both naming rank 1), beside
         as many healthy models, whose stages run on the groups that the faults ended and the
         workers started again; then `--trials` times, a driver killed while its worker holds
         a warm group (the second of two models waits in its load stage, after the first
         model's ddp passed on a group whose ranks the bench sees alive), resumed to the end
         (not in `--fast`: tests/test_distributed_stages.py holds each)
  trainer  one sweep (embedded Ray, 2 CPUs) of load, forward, backward and `trainer`
         (transformers' Trainer, on the CPU): `--trials` models per fault inside the trainer
         stage (a segfault: `crash`; a hang after starting a process: `timeout`, both gone;
         past its memory budget: `oom`), beside as many healthy models (not in `--fast`:
         tests/test_hf_training.py holds each)
Per fault type it prints: trials, faults survived (the right rows, or a retry that leaves no
row and then the right rows), rows lost, rows duplicated, processes left behind (model
children, what they started, Ray processes of a killed driver), and environment errors
recorded as model results. Target: all survived, 0 lost, 0 duplicated, 0 orphaned, 0 mislabelled.

    python bench/fault_matrix.py                       # 20 trials per fault type, 30 kills
    python bench/fault_matrix.py --fast                # 1 per fault type, 1 SIGTERM, 1 kill (CI)
    python bench/fault_matrix.py --fast --load 2       # beside two CPU-bound processes
    python bench/fault_matrix.py --sections ops,ops-env,ops-kill   # the op sweep's
    python bench/fault_matrix.py --sections kill --kills 50 --seed 7
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from runners import containment, faults  # noqa: E402
from runners.containment import alive  # noqa: E402

HFSWEEP = [sys.executable, "-m", "sweep"]
MARK = "HFSWEEP_BENCH_MARK"  # every process of a trial inherits it: what is left is an orphan
STAGES = ["load", "forward"]
# Model types whose tiny models build and pass load + forward on the CPU in about a second.
TYPES = ["llama", "gpt2", "bert", "opt", "mistral", "qwen2", "roberta", "gpt_neo", "electra"]


@dataclass
class Line:
    fault: str
    trials: int = 0
    survived: int = 0
    lost: int = 0
    duplicated: int = 0
    orphans: int = 0
    mislabelled: int = 0


# ---- shared ------------------------------------------------------------------------------


def write_trial_catalog(folder: Path, n: int, prefix: str) -> tuple[Path, list[str]]:
    """A catalog of `n` models whose configs (beside it, as `catalog refresh` leaves them)
    differ by one harmless key, so every model is its own tiny model and task."""
    from model_configs.catalog import entry_from_row, write_catalog
    from model_configs.resolve import transformers_default_config

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prefix}.csv"
    ids, entries = [], []
    for i in range(n):
        model_type = TYPES[i % len(TYPES)]
        model_id = f"{prefix}/{model_type}-{i:04d}"
        ids.append(model_id)
        entries.append(
            entry_from_row(
                {
                    "model_id": model_id,
                    "rank": str(i + 1),
                    "downloads_30d": str(10**6 - i),
                    "library_name": "transformers",
                    "model_type_hint": model_type,
                }
            )
        )
        config = transformers_default_config(model_type)
        config["hfsweep_trial"] = model_id
        target = folder / prefix / model_id
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps(config))
    write_catalog(entries, path)
    return path, ids


def shrunk_hashes(catalog: Path) -> dict[str, str]:
    """Plan the catalog here to learn each model's shrunk config hash (what faults match)."""
    from ground.schema import Stage
    from model_configs.catalog import open_catalog
    from sweep.plan import plan_entries

    stream = open_catalog(str(catalog))
    planned = plan_entries(
        list(stream.entries()), [Stage(s) for s in STAGES], config_dir=stream.config_dir
    )
    return {p.entry.model_id: p.spec.hash for p in planned if p.spec is not None}


def read_rows(store: Path, run_id: str) -> list[dict[str, Any]]:
    from reports.store import Store

    return Store(store).read("results", run_id).to_pylist()


def pair_counts(rows: list[dict[str, Any]]) -> Counter:
    return Counter((r["model_id"], r["stage"]) for r in rows)


def describe(pid: int) -> str:
    """`pid (parent ppid): command line`, for what a trial left behind."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} (parent {stat[1]}): {cmd.strip()[:160]}"


def left_behind(mark: str, grace_s: float = 10.0, driver: int | None = None) -> list[int]:
    """Processes of a trial still alive `grace_s` after its driver ended (then killed; what
    they were goes to stderr): those with its mark and, given the `driver`'s pid, those in a Ray
    session it created (Ray's agents, whose titles overwrite the mark)."""
    ended = time.time()

    def find() -> list[int]:
        found = set(containment.processes_with_env(MARK, mark))
        if driver is not None:
            found |= set(containment.processes_in_ray_session(driver, ended))
        return sorted(found)

    deadline = time.monotonic() + grace_s
    left = find()
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = find()
    for pid in left:
        print(f"left behind {grace_s:g} s after its driver: {describe(pid)}", file=sys.stderr)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def wait_all_dead(pids: list[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


def run_command(catalog: Path, store: Path, run_id: str, *extra: str) -> list[str]:
    """`hfsweep run` over the whole trial catalog at the bench's stages, without the report."""
    return [
        *HFSWEEP,
        "run",
        "--catalog",
        str(catalog),
        "--top",
        "100000",
        "--store",
        str(store),
        "--run-id",
        run_id,
        "--stages",
        ",".join(STAGES),
        "--no-report",
        *extra,
    ]


def hfsweep_run(
    catalog: Path, store: Path, run_id: str, *extra: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    cmd = run_command(catalog, store, run_id, *extra)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def bench_env(mark: str, rules: list[dict[str, Any]] | None, state: Path) -> dict[str, str]:
    env = {**os.environ, MARK: mark, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env.pop(faults.ENV, None)
    if rules is not None:
        env[faults.ENV] = json.dumps(rules)
        env[faults.STATE_ENV] = str(state)
    return env


# ---- model faults ------------------------------------------------------------------------

# name, rule (without match), what the model's rows must say: {stage: (status, attempt)}
# The stage timeout of the model and op sections: long enough that a stage that allocates to
# its 1 GiB budget ends in `oom` on a machine loaded to several times its cores (at 8 s it once
# ran out of time first, and was a `timeout`), short enough that the hang trial stays cheap.
TIMEOUT = "20"

MODEL_FAULTS: list[tuple[str, dict[str, Any], dict[str, tuple[str, int]], bool]] = [
    # (label, rule, expected rows, an environment fault: rows other than the expected are
    # environment errors recorded as the model's result)
    (
        "segfault in a stage",
        {"at": "stage:forward", "fault": "segfault"},
        {"load": ("pass", 1), "forward": ("crash", 1)},
        False,
    ),
    (
        "hang in a stage",
        {"at": "stage:forward", "fault": "hang"},
        {"load": ("pass", 1), "forward": ("timeout", 1)},
        False,
    ),
    (
        "allocation past the memory budget",
        {"at": "stage:forward", "fault": "alloc"},
        {"load": ("pass", 1), "forward": ("oom", 1)},
        False,
    ),
    (
        "exception that cannot be pickled",
        {"at": "stage:forward", "fault": "unpicklable"},
        {"load": ("pass", 1), "forward": ("fail", 1)},
        False,
    ),
    (
        "child killed from outside (kill -9)",
        {"at": "stage:forward", "fault": "kill", "times": 1},
        {"load": ("pass", 2), "forward": ("pass", 2)},
        True,
    ),
    (
        "worker killed mid-task",
        {"at": "stage:forward", "fault": "kill_parent", "times": 1},
        {"load": ("pass", 2), "forward": ("pass", 2)},
        True,
    ),
    (
        "device error in the child (set-up)",
        {"at": "setup", "fault": "env", "times": 1},
        {"load": ("pass", 2), "forward": ("pass", 2)},
        True,
    ),
    (
        "device error inside a stage",
        {"at": "stage:forward", "fault": "env", "times": 1},
        {"load": ("pass", 2), "forward": ("pass", 2)},
        True,
    ),
    (
        "environment error while planning",
        {"at": "plan", "fault": "env", "times": 1},
        {"load": ("pass", 1), "forward": ("pass", 1)},
        True,
    ),
    (
        "runtime env that cannot be set up",
        {"at": "submit", "fault": "runtime_env", "times": 1},
        {"load": ("pass", 2), "forward": ("pass", 2)},
        True,
    ),
    (
        "lost object (ObjectLostError on get)",
        {"at": "get", "fault": "lose_object", "times": 1},
        {"load": ("pass", 2), "forward": ("pass", 2)},
        True,
    ),
]


def section_model(trials: int, work: Path) -> list[Line]:
    n_faulty = trials * len(MODEL_FAULTS)
    catalog, ids = write_trial_catalog(work / "model", n_faulty + trials, "mm")
    hashes = shrunk_hashes(catalog)
    rng = random.Random(0)
    order = list(range(len(ids)))
    rng.shuffle(order)  # faults spread over the catalog, healthy models between them
    plan: dict[str, int] = {}  # model -> fault index (absent: healthy)
    rules: list[dict[str, Any]] = []
    for slot, i in enumerate(order[:n_faulty]):
        kind = slot % len(MODEL_FAULTS)
        model = ids[i]
        rule = dict(MODEL_FAULTS[kind][1])
        rule["match"] = model if rule["at"] == "plan" else hashes[model]
        plan[model] = kind
        rules.append(rule)
    state, store, mark = work / "model-state", work / "model-store", uuid.uuid4().hex
    env = bench_env(mark, rules, state)
    extra = ["--num-cpus", "2", "--timeout", TIMEOUT, "--memory-limit", "1", "--retries", "2"]
    start = time.monotonic()
    proc = hfsweep_run(catalog, store, "matrix", *extra, env=env, timeout=3600)
    seconds = time.monotonic() - start
    orphans_after = left_behind(mark)
    truncated = truncate_empty_parts(store, "matrix", ("results", "alternatives"))
    again = hfsweep_run(catalog, store, "matrix", *extra, env=env, timeout=600)
    repaired = Line("part of no rows truncated to 100 bytes")
    repaired.trials = 1
    repaired.survived = int(again.returncode == 0 and empty_parts_repaired(store, truncated))
    rows = read_rows(store, "matrix")
    counts = pair_counts(rows)
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault(r["model_id"], {})[r["stage"]] = r
    fired_by_rule: dict[int, list[int]] = {}
    for name in os.listdir(state) if state.is_dir() else []:
        if name.startswith("fired-"):
            _, index, pid = name.split("-")
            fired_by_rule.setdefault(int(index), []).append(int(pid))
    spawned = (
        [int(n.split("-")[1]) for n in os.listdir(state) if n.startswith("spawned-")]
        if state.is_dir()
        else []
    )
    lines = [Line(label) for label, *_ in MODEL_FAULTS]
    healthy = Line("(healthy models beside them)")
    rule_of = {ids[i]: slot for slot, i in enumerate(order[:n_faulty])}  # model -> rule index
    for model in ids:
        kind = plan.get(model)
        line = healthy if kind is None else lines[kind]
        expected = {s: ("pass", 1) for s in STAGES} if kind is None else MODEL_FAULTS[kind][2]
        env_fault = kind is not None and MODEL_FAULTS[kind][3]
        line.trials += 1
        got = by_model.get(model, {})
        lost = sum(1 for s in STAGES if counts[(model, s)] == 0)
        dup = sum(counts[(model, s)] - 1 for s in STAGES if counts[(model, s)] > 1)
        pids = fired_by_rule.get(rule_of.get(model, -1), [])
        orphans = len(wait_all_dead(pids, 2.0))
        ok_rows = all(
            s in got and (got[s]["status"], got[s]["attempt"]) == expected[s] for s in STAGES
        )
        mislabelled = sum(
            1
            for s in STAGES
            if s in got
            and got[s]["status"] != "pass"
            and (env_fault or got[s]["error_type"] in ("DeviceError", "EnvironmentFault"))
        )
        line.lost += lost
        line.duplicated += dup
        line.orphans += orphans
        line.mislabelled += mislabelled
        survived = ok_rows and not lost and not dup and not orphans
        line.survived += int(survived)
        if not survived:  # say what the rows were: a failed trial is read from CI's output
            seen = {
                s: (r["status"], r["attempt"], r["error_type"], (r["error_message"] or "")[:300])
                for s, r in got.items()
            }
            print(f"{line.fault}: {model} expected {expected}, got {seen}", file=sys.stderr)
    whole = Line("(the sweep: driver exit, rerun, processes left)")
    whole.trials = 1
    whole.orphans = len(orphans_after) + len(wait_all_dead(spawned, 2.0))
    nothing_left = f"{len(ids)} already done" in again.stderr
    whole.survived = int(proc.returncode == 0 and again.returncode == 0 and nothing_left)
    whole.duplicated = sum(c - 1 for c in counts.values() if c > 1)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    print(
        f"model section: {len(ids)} models in {seconds:.0f} s (exit {proc.returncode}, rerun exit {again.returncode})",
        file=sys.stderr,
    )
    return [*lines, healthy, whole, repaired]


def truncate_empty_parts(store: Path, run_id: str, tables: tuple[str, ...]) -> list[Path]:
    """Cut the run's part of no rows of each table to 100 bytes (what a full disk or a killed
    copy leaves): an outside reader of the table then fails on it."""
    parts = [next((store / t / f"run_id={run_id}").glob("empty-*.parquet")) for t in tables]
    for part in parts:
        part.write_bytes(part.read_bytes()[:100])
    return parts


def empty_parts_repaired(store: Path, truncated: list[Path]) -> bool:
    """After the rerun: each truncated part put aside, and pyarrow reads every table whole."""
    import pyarrow.dataset as pads

    aside = all((p.parent / f".damaged-{p.name}").exists() for p in truncated)
    try:
        for table in {p.parent.parent.name for p in truncated}:
            pads.dataset(store / table, format="parquet").to_table()
    except Exception as exc:
        print(f"after the rerun, pyarrow cannot read the store: {exc}", file=sys.stderr)
        return False
    return aside


# ---- a node that leaves --------------------------------------------------------------------


def _ray_bin() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else shutil.which("ray") or "ray"


def _start_node(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            _ray_bin(),
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            "--disable-usage-stats",
            *args,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return proc


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def _kill_session(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    sid = proc.pid  # what it started in its session may have left its group: sweep the session
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _session_of(int(entry.name)) == sid:
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)


def _alive_nodes(address: str, env: dict[str, str], n: int = 0, seconds: float = 0.0) -> int:
    """How many nodes of the cluster at `address` are alive (0: it does not answer yet), once
    `n` are or `seconds` passed: one driver that connects once and asks the cluster every half
    second (a driver started per question costs a second and a half of CPU each)."""
    code = (
        "import sys, time, ray\n"
        "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
        "alive = lambda: sum(1 for n in ray.nodes() if n['Alive'])\n"
        "until = time.monotonic() + float(sys.argv[3])\n"
        "while alive() < int(sys.argv[2]) and time.monotonic() < until:\n"
        "    time.sleep(0.5)\n"
        "print(alive())"
    )
    quiet = {k: v for k, v in env.items() if k not in (faults.ENV, faults.STATE_ENV)}
    proc = subprocess.run(
        [sys.executable, "-c", code, address, str(n), str(seconds)],
        env=quiet,
        capture_output=True,
        text=True,
    )
    last = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    return int(last[0]) if last and last[0].isdigit() else 0


def _answers(address: str) -> bool:
    """Whether the head's port takes a connection (before a driver is started to ask it)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _wait_for_nodes(address: str, env: dict[str, str], n: int, seconds: float = 600.0) -> None:
    """Until `n` nodes are alive (the deadline guards against a hang, it is not a speed)."""
    deadline = time.monotonic() + seconds
    while not (_answers(address) and _alive_nodes(address, env, n, 120.0) >= n):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster at {address} never had {n} nodes alive")
        time.sleep(1.0)


def _fired_rules(state: Path) -> list[tuple[int, int]]:
    """(rule, pid) of every firing recorded in the fault hook's state folder."""
    names = os.listdir(state) if state.is_dir() else []
    return [(int(n.split("-")[1]), int(n.split("-")[2])) for n in names if n.startswith("fired-")]


def section_node(trials: int, work: Path, port: int = 6397) -> list[Line]:
    catalog, ids = write_trial_catalog(work / "node", max(6, 7 * trials), "nn")
    hashes = shrunk_hashes(catalog)
    # each model waits in its load stage until the bench sees where it runs: on the head it is
    # released, on the worker node the node is killed under it (a trial), whatever the speed
    rules = [{"at": "stage:load", "match": hashes[m], "fault": "wait"} for m in ids]
    state, store, mark = work / "node-state", work / "node-store", uuid.uuid4().hex
    env = bench_env(mark, rules, state)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    head = _start_node(["--head", f"--port={port}", "--include-dashboard=false"], env)
    address = f"127.0.0.1:{port}"
    worker = None
    line = Line("a node that leaves the cluster")
    try:
        _wait_for_nodes(address, env, 1)
        worker = _start_node([f"--address={address}"], env)
        _wait_for_nodes(address, env, 2)
        driver = subprocess.Popen(
            [
                *HFSWEEP,
                "run",
                "--address",
                address,
                "--catalog",
                str(catalog),
                "--top",
                "100000",
                "--store",
                str(store),
                "--run-id",
                "node",
                "--stages",
                ",".join(STAGES),
                "--retries",
                "6",
                "--timeout",
                "60",
                "--no-report",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed_children: list[int] = []
        seen: set[int] = set()  # firings already released or killed
        deadline = time.monotonic() + 600 * trials + 600  # a guard against a hang
        while line.trials < trials and driver.poll() is None and time.monotonic() < deadline:
            waiting = [(i, pid) for i, pid in _fired_rules(state) if pid not in seen]
            waiting = [(i, pid) for i, pid in waiting if alive(pid)]
            if not waiting:
                time.sleep(0.2)
                continue
            on_node = [pid for _, pid in waiting if worker and _session_of(pid) == worker.pid]
            for index, pid in waiting:
                seen.add(pid)
                if pid not in on_node:
                    faults.release(str(state), index)  # on the head: it goes on
            if not on_node:
                continue
            _kill_session(worker)  # the node leaves: raylet, its workers, their children
            killed_children += on_node
            line.trials += 1
            worker = _start_node([f"--address={address}"], env)
            _wait_for_nodes(address, env, 2)
        faults.release(str(state))  # the trials are done: every model goes on
        _, err = driver.communicate(timeout=1800)
        rows = read_rows(store, "node")
        counts = pair_counts(rows)
        line.lost = sum(1 for m in ids for s in STAGES if counts[(m, s)] == 0)
        line.duplicated = sum(c - 1 for c in counts.values() if c > 1)
        line.mislabelled = sum(1 for r in rows if r["status"] != "pass")
        line.orphans = len(wait_all_dead(killed_children, 5.0))
        retried = sum(1 for r in rows if (r["attempt"] or 1) > 1) // len(STAGES)
        ok = (
            driver.returncode == 0
            and not line.lost
            and not line.duplicated
            and not line.mislabelled
        )
        line.survived = line.trials if ok and retried >= 1 else 0
        if driver.returncode != 0:
            print(err[-3000:], file=sys.stderr)
        print(
            f"node section: {line.trials} node kills, {retried} models retried, driver exit {driver.returncode}",
            file=sys.stderr,
        )
    finally:
        if worker is not None:
            _kill_session(worker)
        _kill_session(head)
        forget_cluster(port)
        line.orphans += len(left_behind(mark, 5.0))
    return [line]


def forget_cluster(port: int) -> None:
    """`ray start --head` leaves the address of its cluster for later `ray.init()` calls to
    connect to; a cluster killed rather than `ray stop`ped leaves it behind: remove it."""
    from ray._common.utils import get_ray_address_file  # under RAY_TMPDIR when that is set

    path = Path(get_ray_address_file(None))
    with contextlib.suppress(OSError):
        if path.read_text().strip().endswith(f":{port}"):
            path.unlink()


# ---- the environment keeps failing ---------------------------------------------------------


def section_env(trials: int, work: Path) -> list[Line]:
    line = Line("environment error that keeps happening")
    for t in range(trials):
        catalog, ids = write_trial_catalog(work / f"env{t}", 2, f"ee{t}")
        bad, good = ids
        hashes = shrunk_hashes(catalog)
        rules = [{"at": "setup", "match": hashes[bad], "fault": "env"}]
        store, mark = work / f"env{t}-store", uuid.uuid4().hex
        env = bench_env(mark, rules, work / f"env{t}-state")
        first = hfsweep_run(
            catalog, store, "env", "--local", "--retries", "1", env=env, timeout=600
        )
        rows = read_rows(store, "env")
        recorded = [r for r in rows if r["model_id"] == bad]
        clear = first.returncode == 3 and bad in first.stderr and "Traceback" not in first.stderr
        second = hfsweep_run(
            catalog, store, "env", "--local", env=bench_env(mark, None, work), timeout=600
        )
        counts = pair_counts(read_rows(store, "env"))
        line.trials += 1
        line.mislabelled += len(recorded)
        line.lost += sum(1 for m in ids for s in STAGES if counts[(m, s)] == 0)
        line.duplicated += sum(c - 1 for c in counts.values() if c > 1)
        line.orphans += len(left_behind(mark, 3.0))
        good_first = {(r["model_id"], r["stage"]) for r in rows} == {(good, s) for s in STAGES}
        if (
            clear
            and good_first
            and not recorded
            and second.returncode == 0
            and all(counts[(m, s)] == 1 for m in ids for s in STAGES)
        ):
            line.survived += 1
        elif t == 0:
            print(first.stderr[-2000:], second.stderr[-2000:], file=sys.stderr)
    return [line]


# ---- the driver killed at random moments ---------------------------------------------------


def start_driver(
    cmd: list[str], mark: str, rules: list[dict[str, Any]], state: Path
) -> subprocess.Popen:
    """`cmd` (a driver) with the fault `rules` and the bench's `mark` in its environment, its
    stderr kept for the trial's report."""
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=bench_env(mark, rules, state),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_and_resume(
    line: Line,
    cmd: list[str],
    counts: Callable[[], Counter],
    kills: int,
    rng: random.Random,
    work: Path,
    waiting: dict[str, Any],
) -> None:
    """Start `cmd` (a driver) and SIGKILL it at a random moment, `kills` times, each time
    counting what it lost (rows there before, gone after), doubled or left behind; then run it
    to the end. In the killed runs the `waiting` fault rule (the last task's `wait`) holds the
    run open, so every kill lands mid-run, however fast the rest ran; the final run has no
    fault. A driver that finished before its kill anyway is no trial."""
    seen: Counter = Counter()
    for _ in range(kills):
        mark = uuid.uuid4().hex
        driver = start_driver(cmd, mark, [waiting], work / "kill-state")
        try:
            driver.wait(rng.uniform(1.0, 20.0))
        except subprocess.TimeoutExpired:
            driver.send_signal(signal.SIGKILL)
        _, err = driver.communicate()
        orphans = left_behind(mark, 10.0, driver.pid)
        now = counts()
        lost = sum(1 for key, n in seen.items() if n and now[key] == 0)
        dup = sum(n - 1 for n in now.values() if n > 1)
        line.lost += lost
        line.duplicated += dup
        line.orphans += len(orphans)
        seen = now
        if driver.returncode == 0:
            print(f"{line.fault}: the run finished before kill {line.trials + 1} of {kills}",
                  file=sys.stderr)  # fmt: skip
            break
        line.trials += 1
        errored = driver.returncode != -signal.SIGKILL
        if errored:
            print(err[-2000:], file=sys.stderr)
        line.survived += int(not lost and not dup and not orphans and not errored)
    finish_run(line, cmd, work)


def finish_run(line: Line, cmd: list[str], work: Path) -> None:
    """The same command without faults, after the kills: it must finish the run (exit 0);
    otherwise the line's last trial did not survive."""
    final = subprocess.run(
        cmd,
        cwd=ROOT,
        env=bench_env(uuid.uuid4().hex, None, work),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if final.returncode != 0:
        line.survived = min(line.survived, line.trials - 1)
        print(final.stderr[-2000:], file=sys.stderr)


def section_kill(kills: int, work: Path, seed: int, models: int, fast: bool = False) -> list[Line]:
    rng = random.Random(seed)
    # The kills land at many points of the run (on the 2-core machine 150 models took 19
    # kills of 1-20 s each, with Ray starting again after every one, to finish); the last
    # model waits until the kills are done, so none lands after the run's end, however few
    # models come before it. `--fast` (CI) runs on one CPU (one Ray worker to start after each
    # stop, the models one after another), stops the driver with SIGTERM while its second model
    # waits and kills it with SIGKILL at an explicit point, never a moment that races the
    # machine's speed: while its last model waits and rows are in the store.
    catalog, ids = write_trial_catalog(work / "kill", models, "kk")
    hashes = shrunk_hashes(catalog)
    waiting = {"at": "stage:load", "match": hashes[ids[-1]], "fault": "wait"}
    store = work / "kill-store"
    cmd = run_command(catalog, store, "kill", "--num-cpus", "1" if fast else "2")
    counts = lambda: pair_counts(read_rows(store, "kill"))  # noqa: E731
    status = lambda: run_status(store, "kill")  # noqa: E731
    if fast:
        term_waiting = {**waiting, "match": hashes[ids[1]]}
        term = term_and_resume(cmd, counts, work, term_waiting, status)
        line = Line("driver killed (SIGKILL) with a task in flight")
        kill_in_flight_and_resume(line, cmd, counts, status, work, waiting, ids[-1])
    else:
        term = term_and_resume(cmd, counts, work, waiting, status)
        line = Line("driver killed (SIGKILL) at a random moment")
        kill_and_resume(line, cmd, counts, kills, rng, work, waiting)
    rows = read_rows(store, "kill")
    counts = pair_counts(rows)
    missing = sum(1 for m in ids for s in STAGES if counts[(m, s)] == 0)
    line.lost += missing
    line.duplicated = max(line.duplicated, sum(c - 1 for c in counts.values() if c > 1))
    line.mislabelled = sum(1 for r in rows if r["status"] != "pass")
    finished = status() == "finished"
    if missing or not finished:
        line.survived = min(line.survived, line.trials - 1)
    if not finished:
        print(f"{line.fault}: the run is {status()!r} at the end, not finished", file=sys.stderr)
    print(
        f"kill section: {line.trials} kills; the final run wrote {len(rows)} rows for {len(ids)} models",
        file=sys.stderr,
    )
    return [term, line]


def run_status(store: Path, run_id: str) -> str | None:
    from reports.store import Store

    row = Store(store).run(run_id)
    return None if row is None else row["status"]


def kill_in_flight_and_resume(
    line: Line,
    cmd: list[str],
    counts: Callable[[], Counter],
    status: Callable[[], str | None],
    work: Path,
    waiting: dict[str, Any],
    held: str,
) -> None:
    """One SIGKILL of the driver at an explicit point: once its `waiting` task blocks (the
    run's last model) and rows are in the store. Nothing that was stored is lost, nothing is
    doubled, nothing it started is left, the waiting model (`held`) has no row and the run stays
    `running` (no clean shutdown happened); then the same command finishes it."""
    mark, state = uuid.uuid4().hex, work / "kill-state"
    line.trials += 1
    driver = start_driver(cmd, mark, [waiting], state)
    deadline = time.monotonic() + 600  # a guard against a hang, not a speed
    at_point = False
    while driver.poll() is None and time.monotonic() < deadline:
        if faults.fired(str(state)) and sum(counts().values()):
            at_point = True
            break
        time.sleep(0.2)
    before = counts()
    driver.send_signal(signal.SIGKILL)
    _, err = driver.communicate()
    orphans = left_behind(mark, 10.0, driver.pid)
    now = counts()
    lost = sum(1 for key, n in before.items() if n and now[key] == 0)
    dup = sum(n - 1 for n in now.values() if n > 1)
    early = sum(n for (model, _), n in now.items() if model == held)  # it never got past load
    line.lost += lost
    line.duplicated += dup
    line.orphans += len(orphans)
    line.mislabelled += early
    killed = driver.returncode == -signal.SIGKILL
    left_running = status() == "running"
    if not (at_point and killed and left_running):
        print(
            f"{line.fault}: at the point {at_point}, exit {driver.returncode}, run "
            f"{status()!r} after the kill\n{err[-2000:]}",
            file=sys.stderr,
        )
    line.survived += int(
        at_point and killed and left_running and not lost and not dup and not orphans and not early
    )
    finish_run(line, cmd, work)


def term_and_resume(
    cmd: list[str],
    counts: Callable[[], Counter],
    work: Path,
    waiting: dict[str, Any],
    status: Callable[[], str | None],
) -> Line:
    """SIGTERM to the driver (what cron, a job scheduler or Kubernetes sends) once the `waiting`
    task blocks (its `fired-` file: the run is mid-run, Ray up, whatever the machine's speed):
    it must stop as on Ctrl-C, with exit 143, its rows flushed, one line saying how to resume
    and no stack from Ray's signal handler, the run `interrupted`, and leave nothing behind;
    the kill trials after it resume the run."""
    line = Line("driver stopped with SIGTERM mid-run")
    line.trials = 1
    mark, state = uuid.uuid4().hex, work / "term-state"
    driver = start_driver(cmd, mark, [waiting], state)
    deadline = time.monotonic() + 600
    while not faults.fired(str(state)) and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    before = counts()
    driver.send_signal(signal.SIGTERM)
    try:
        _, err = driver.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        driver.kill()
        _, err = driver.communicate()
    line.orphans = len(left_behind(mark, 10.0, driver.pid))
    after = counts()
    line.lost = sum(1 for key, n in before.items() if n and after[key] == 0)
    line.duplicated = sum(n - 1 for n in after.values() if n > 1)
    resumable = "--run-id kill" in err and err.count("resume with:") == 1
    no_stack = "SIGTERM received" not in err and "PC: @" not in err
    interrupted = status() == "interrupted"
    line.survived = int(
        driver.returncode == 143
        and resumable
        and no_stack
        and interrupted
        and not line.orphans
        and not line.lost
    )
    if not line.survived:
        print(
            f"SIGTERM: exit {driver.returncode}, run {status()!r}\n{err[-3000:]}", file=sys.stderr
        )
    return line


# ---- op-sweep faults -----------------------------------------------------------------------

# OpInfos whose samples pass on the CPU in fp32 in well under a second each (one group each).
OP_NAMES = ["abs", "neg", "exp", "sin", "cos", "tanh", "sigmoid", "sqrt", "floor", "ceil", "trunc"]
# label, rule (without match), the status of the faulted sample's forward (None: the
# environment's fault: retried, every row passes)
OP_FAULTS: list[tuple[str, dict[str, Any], str | None]] = [
    ("op: segfault in a sample", {"at": "sample", "fault": "segfault", "times": 1}, "crash"),
    ("op: hang in a sample", {"at": "sample", "fault": "hang", "times": 1}, "timeout"),
    ("op: allocation past the memory budget", {"at": "sample", "fault": "alloc", "times": 1}, "oom"),
    ("op: exception that cannot be pickled", {"at": "sample", "fault": "unpicklable", "times": 1}, "fail"),
    ("op: child killed from outside (kill -9)", {"at": "sample", "fault": "kill", "times": 1}, None),
    ("op: worker killed mid-task", {"at": "sample", "fault": "kill_parent", "times": 1}, None),
    ("op: device error in the child (set-up)", {"at": "setup", "fault": "env", "times": 1}, None),
    ("op: device error inside a sample", {"at": "sample", "fault": "env", "times": 1}, None),
    ("op: runtime env that cannot be set up", {"at": "submit", "fault": "runtime_env", "times": 1}, None),
    ("op: lost object (ObjectLostError on get)", {"at": "get", "fault": "lose_object", "times": 1}, None),
]  # fmt: skip


def hfsweep_ops(
    store: Path, run_id: str, ops: list[str], *extra: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    cmd = [*HFSWEEP, "ops", "--ops", ",".join(ops), "--dtypes", "fp32", "--device", "cpu"]
    cmd += ["--store", str(store), "--run-id", run_id, "--group-size", "1", "--no-report"]
    return subprocess.run(
        [*cmd, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def op_rows(store: Path, run_id: str) -> list[dict[str, Any]]:
    from reports.store import Store

    return Store(store).read("ops", run_id).to_pylist()


def op_keys(rows: list[dict[str, Any]]) -> Counter:
    return Counter((r["opinfo"], r["dtype"], r["sample_index"], r["phase"]) for r in rows)


def section_ops(trials: int, work: Path) -> list[Line]:
    """`trials` rounds of one op sweep (embedded Ray, 2 CPUs) over OpInfos of one group each:
    one OpInfo per fault type, its first sample faulted, beside a healthy one; then the same
    command again (nothing to do, nothing doubled). Every sample of a healthy OpInfo, or of one
    whose fault was the environment's (retried), passes; the faulted sample of the others has
    the fault's status and the rest of its OpInfo passes."""
    assert len(OP_NAMES) >= len(OP_FAULTS) + 1
    lines = [Line(label) for label, *_ in OP_FAULTS]
    healthy = Line("op: (healthy OpInfos beside them)")
    whole = Line("op: (the sweep: driver exit, rerun, processes left)")
    ops = OP_NAMES[: len(OP_FAULTS) + 1]
    extra = ["--num-cpus", "2", "--timeout", TIMEOUT, "--memory-limit", "1", "--retries", "2"]
    for t in range(trials):
        state, store, mark = work / f"ops{t}-state", work / f"ops{t}-store", uuid.uuid4().hex
        rules = [{**rule, "match": op} for (_, rule, _), op in zip(OP_FAULTS, ops, strict=False)]
        env = bench_env(mark, rules, state)
        run_id = f"ops{t}"
        start = time.monotonic()
        proc = hfsweep_ops(store, run_id, ops, *extra, env=env, timeout=3600)
        seconds = time.monotonic() - start
        orphans_after = left_behind(mark)
        again = hfsweep_ops(store, run_id, ops, *extra, env=env, timeout=600)
        rows = op_rows(store, run_id)
        counts = op_keys(rows)
        for i, op in enumerate(ops):
            fault = OP_FAULTS[i] if i < len(OP_FAULTS) else None
            line = lines[i] if fault else healthy
            expected = fault[2] if fault else None
            mine = [r for r in rows if r["opinfo"] == op]
            line.trials += 1
            lost = int(not mine)
            line.lost += lost
            line.duplicated += sum(n - 1 for k, n in counts.items() if k[0] == op and n > 1)
            line.orphans += len(wait_all_dead(faults.fired(str(state), i), 2.0)) if fault else 0
            bad = [r for r in mine if r["status"] not in ("pass", "skip")]
            faulted = [r for r in bad if r["phase"] == "forward"]
            if expected is None:  # the environment's: nothing but passes
                line.mislabelled += len(bad)
                ok = not bad and bool(mine)
                ok = ok and (fault is None or bool(faults.fired(str(state), i)))
            else:
                line.mislabelled += sum(
                    r["error_type"] in ("DeviceError", "EnvironmentFault") for r in bad
                )
                ok = [r["status"] for r in faulted] == [expected] and all(
                    r["status"] == "not_run" for r in bad if r not in faulted
                )
            ok = ok and not lost and not any(n > 1 for k, n in counts.items() if k[0] == op)
            line.survived += int(ok)
            if not ok:
                seen = [
                    (r["sample_index"], r["phase"], r["status"], r["error_type"],
                     (r["error_message"] or "")[:200])
                    for r in mine
                ]  # fmt: skip
                print(f"{line.fault}: {op} expected {expected or 'all pass'}, got {seen}",
                      file=sys.stderr)  # fmt: skip
        whole.trials += 1
        whole.orphans += len(orphans_after)
        whole.duplicated += sum(n - 1 for n in counts.values() if n > 1)
        nothing_left = f"{len(ops)} OpInfo x dtype already done, 0 rows written" in again.stderr
        whole.survived += int(proc.returncode == 0 and again.returncode == 0 and nothing_left)
        if proc.returncode != 0 or again.returncode != 0:
            print(proc.stderr[-3000:], again.stderr[-1500:], file=sys.stderr)
        print(
            f"ops section, round {t + 1}: {len(ops)} OpInfos in {seconds:.0f} s "
            f"(exit {proc.returncode}, rerun exit {again.returncode})",
            file=sys.stderr,
        )
    return [*lines, healthy, whole]


def section_ops_env(trials: int, work: Path) -> list[Line]:
    """`trials` op sweeps (`--local`) where the device never sets up for one OpInfo: no row
    for it (never `crash`), exit 3 naming it, then the same command without the fault."""
    line = Line("op: environment error that keeps happening")
    ops = OP_NAMES[:2]
    for t in range(trials):
        bad, good = ops
        store, mark = work / f"opsenv{t}-store", uuid.uuid4().hex
        rules = [{"at": "setup", "match": bad, "fault": "env"}]
        env = bench_env(mark, rules, work / f"opsenv{t}-state")
        first = hfsweep_ops(store, "env", ops, "--local", "--retries", "1", env=env, timeout=600)
        rows = op_rows(store, "env")
        recorded = [r for r in rows if r["opinfo"] == bad]
        clear = first.returncode == 3 and f"{bad}:fp32" in first.stderr
        clear = clear and "Traceback" not in first.stderr
        second = hfsweep_ops(store, "env", ops, "--local", env=bench_env(mark, None, work),
                             timeout=600)  # fmt: skip
        counts = op_keys(op_rows(store, "env"))
        line.trials += 1
        line.mislabelled += len(recorded)
        line.lost += sum(1 for op in ops if not any(k[0] == op for k in counts))
        line.duplicated += sum(n - 1 for n in counts.values() if n > 1)
        line.orphans += len(left_behind(mark, 3.0))
        good_first = {r["opinfo"] for r in rows} == {good}
        if clear and good_first and not recorded and second.returncode == 0 and not line.lost:
            line.survived += 1
        elif t == 0:
            print(first.stderr[-2000:], second.stderr[-2000:], file=sys.stderr)
    return [line]


def section_ops_kill(kills: int, work: Path, seed: int) -> list[Line]:
    """One op run (embedded Ray) whose driver is killed with SIGKILL at a random moment,
    `kills` times, each time resumed with the same run id, then finished: every sample row
    exactly once."""
    from runners.op_sweep.opdb import op_db

    rng = random.Random(seed)
    unary = [o.name for o in op_db() if type(o).__name__ == "UnaryUfuncInfo"]
    ops = sorted(set(unary))[: max(60, 20 * kills)]  # fast OpInfos, one group each
    store = work / "opskill-store"
    line = Line("op: driver killed (SIGKILL) at a random moment")
    cmd = [*HFSWEEP, "ops", "--ops", ",".join(ops), "--dtypes", "fp32", "--device", "cpu"]
    cmd += ["--store", str(store), "--run-id", "kill", "--num-cpus", "2", "--group-size", "1"]
    cmd += ["--no-report"]
    waiting = {"at": "sample", "match": ops[-1], "fault": "wait"}
    kill_and_resume(line, cmd, lambda: op_keys(op_rows(store, "kill")), kills, rng, work, waiting)
    counts = op_keys(op_rows(store, "kill"))
    missing = sum(1 for op in ops if not any(k[0] == op for k in counts))
    line.lost += missing
    line.duplicated = max(line.duplicated, sum(n - 1 for n in counts.values() if n > 1))
    if missing:
        line.survived = min(line.survived, line.trials - 1)
    print(f"ops kill section: {line.trials} kills; {len(ops)} OpInfos, {sum(counts.values())} "
          "rows at the end", file=sys.stderr)  # fmt: skip
    return [line]


# ---- a distributed stage's group of ranks ---------------------------------------------------

GROUP_STAGES = ["load", "forward", "backward", "ddp"]
# label, rule (without match), the model's expected rows {stage: (status, attempt)}, an
# environment fault, the rank a failed row must name
GROUP_FAULTS: list[tuple[str, dict[str, Any], dict[str, tuple[str, int]], bool, int | None]] = [
    (
        "group: one rank killed (kill -9)",
        {"at": "rank1:stage:ddp", "fault": "kill", "times": 1},
        {s: ("pass", 2) for s in GROUP_STAGES},
        True,
        None,
    ),
    (
        "group: a rank raising, the other in a collective",
        {"at": "rank1:collective:allreduce", "fault": "raise"},
        {**{s: ("pass", 1) for s in GROUP_STAGES[:3]}, "ddp": ("fail", 1)},
        False,
        1,
    ),
    (
        "group: a rank over its memory budget",
        {"at": "rank1:stage:ddp", "fault": "alloc"},
        {**{s: ("pass", 1) for s in GROUP_STAGES[:3]}, "ddp": ("oom", 1)},
        False,
        1,
    ),
]


def section_group(trials: int, work: Path) -> list[Line]:
    """One sweep (embedded Ray, 2 CPUs: a task of two ranks takes both) of load, forward,
    backward and ddp on the emulated neuron device, `trials` models per fault placed in rank 1
    of the ddp stage's group, beside as many healthy models."""
    n_faulty = trials * len(GROUP_FAULTS)
    catalog, ids = write_trial_catalog(work / "group", n_faulty + trials, "gg")
    hashes = shrunk_hashes(catalog)
    order = list(range(len(ids)))
    random.Random(1).shuffle(order)
    plan: dict[str, int] = {}
    rules: list[dict[str, Any]] = []
    for slot, i in enumerate(order[:n_faulty]):
        kind = slot % len(GROUP_FAULTS)
        plan[ids[i]] = kind
        rules.append({**GROUP_FAULTS[kind][1], "match": hashes[ids[i]]})
    state, store, mark = work / "group-state", work / "group-store", uuid.uuid4().hex
    env = bench_env(mark, rules, state)
    extra = [
        "--device",
        "neuron",
        "--stages",
        ",".join(GROUP_STAGES),
        "--world-size",
        "2",
        "--num-cpus",
        "2",
        "--timeout",
        "240",
        "--memory-limit",
        "1",
        "--retries",
        "2",
    ]
    start = time.monotonic()
    proc = hfsweep_run(catalog, store, "group", *extra, env=env, timeout=7200)
    seconds = time.monotonic() - start
    orphans_after = left_behind(mark)
    rows = read_rows(store, "group")
    counts = pair_counts(rows)
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        current = by_model.setdefault(r["model_id"], {}).get(r["stage"])
        if current is None or r["attempt"] > current["attempt"]:
            by_model[r["model_id"]][r["stage"]] = r
    lines = [Line(label) for label, *_ in GROUP_FAULTS]
    healthy = Line("group: (healthy models beside them)")
    for model in ids:
        kind = plan.get(model)
        line = healthy if kind is None else lines[kind]
        expected = {s: ("pass", 1) for s in GROUP_STAGES} if kind is None else GROUP_FAULTS[kind][2]
        env_fault = kind is not None and GROUP_FAULTS[kind][3]
        culprit = None if kind is None else GROUP_FAULTS[kind][4]
        line.trials += 1
        got = by_model.get(model, {})
        lost = sum(1 for s in GROUP_STAGES if counts[(model, s)] == 0)
        ok_rows = all(
            s in got and (got[s]["status"], got[s]["attempt"]) == expected[s] for s in GROUP_STAGES
        )
        mislabelled = sum(
            1
            for s in GROUP_STAGES
            if s in got
            and got[s]["status"] != "pass"
            and (env_fault or (s == "ddp" and got[s]["failed_rank"] != culprit))
        )
        line.lost += lost
        line.mislabelled += mislabelled
        survived = ok_rows and not lost and not mislabelled
        line.survived += int(survived)
        if not survived:
            seen = {
                s: (r["status"], r["attempt"], r["failed_rank"], (r["error_message"] or "")[:300])
                for s, r in got.items()
            }
            print(f"{line.fault}: {model} expected {expected}, got {seen}", file=sys.stderr)
    whole = Line("group: (the sweep: driver exit, processes left)")
    whole.trials = 1
    whole.orphans = len(orphans_after)
    whole.duplicated = sum(c - 1 for c in counts.values() if c > 1)
    whole.survived = int(proc.returncode == 0 and not orphans_after)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    print(f"group section: {len(ids)} models in {seconds:.0f} s", file=sys.stderr)
    killed = Line("group: driver killed while a group is warm")
    for trial in range(trials):
        _driver_killed_while_warm(killed, work / f"group-kill-{trial}", extra)
    return [*lines, healthy, whole, killed]


def _driver_killed_while_warm(line: Line, work: Path, extra: list[str]) -> None:
    """One trial: two models; the first one's ddp passes (rule 0 records rank 0 of its group),
    the second waits in its load stage (rule 1) with the group warm beside it; the driver is
    killed there, then the same command runs to the end without faults. What it lost, doubled
    or left behind (the warm group's ranks first), and whether every row passed once."""
    catalog, ids = write_trial_catalog(work, 2, "gk")
    hashes = shrunk_hashes(catalog)
    rules = [
        {"at": "rank0:stage:ddp", "fault": "sleep:0", "match": hashes[ids[0]]},
        {"at": "stage:load", "fault": "wait", "match": hashes[ids[1]]},
    ]
    state, store, mark = work / "state", work / "store", uuid.uuid4().hex
    cmd = run_command(catalog, store, "gk", *extra)
    cmd[cmd.index("--stages") + 1] = ",".join(GROUP_STAGES)
    line.trials += 1
    driver = start_driver(cmd, mark, rules, state)
    deadline = time.monotonic() + 1800  # guards against a hang; not a speed
    while not faults.fired(str(state), 1) and driver.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
    ranks = [pid for pid in faults.fired(str(state), 0) if alive(pid)]
    warm = bool(ranks) and bool(faults.fired(str(state), 1)) and driver.poll() is None
    driver.send_signal(signal.SIGKILL)
    _, err = driver.communicate()
    orphans = left_behind(mark, 10.0)
    before = pair_counts(read_rows(store, "gk"))
    final = subprocess.run(
        cmd, cwd=ROOT, env=bench_env(uuid.uuid4().hex, None, work), capture_output=True,
        text=True, timeout=3600,
    )  # fmt: skip
    rows = read_rows(store, "gk")
    counts = pair_counts(rows)
    line.lost += sum(1 for key, n in before.items() if n and counts[key] == 0)
    line.lost += sum(1 for m in ids for s in GROUP_STAGES if counts[(m, s)] == 0)
    line.duplicated += sum(n - 1 for n in counts.values() if n > 1)
    line.orphans += len(orphans) + len(wait_all_dead(ranks))
    line.mislabelled += sum(1 for r in rows if r["status"] != "pass")
    ok = warm and final.returncode == 0 and not orphans
    ok = ok and all(counts[(m, s)] == 1 for m in ids for s in GROUP_STAGES)
    line.survived += int(ok and all(r["status"] == "pass" for r in rows))
    if not warm:
        print(f"{line.fault}: no warm group was seen at the kill", err[-2000:], file=sys.stderr)
    if final.returncode != 0:
        print(final.stderr[-2000:], file=sys.stderr)


# ---- the hf_training stages ----------------------------------------------------------------

TRAINER_STAGES = ["load", "forward", "backward", "trainer"]
# label, rule, the status of the trainer row (its stages before it pass, each once)
TRAINER_FAULTS: list[tuple[str, dict[str, Any], str]] = [
    ("trainer: segfault inside the stage", {"at": "stage:trainer", "fault": "segfault"}, "crash"),
    # a hang after starting a process of its own: both gone at the deadline
    ("trainer: hang, a process started", {"at": "stage:trainer", "fault": "spawn"}, "timeout"),
    ("trainer: past its memory budget", {"at": "stage:trainer", "fault": "alloc"}, "oom"),
]


def section_trainer(trials: int, work: Path) -> list[Line]:
    """One sweep (embedded Ray, 2 CPUs) of load, forward, backward and transformers' Trainer
    (`trainer`, on the CPU: the containment does not depend on the device), `trials` models per
    fault inside the trainer stage, beside as many healthy models: one row per (model, stage),
    the trainer's with the fault's status, and nothing a model's process started left."""
    n_faulty = trials * len(TRAINER_FAULTS)
    catalog, ids = write_trial_catalog(work / "trainer", n_faulty + trials, "tt")
    hashes = shrunk_hashes(catalog)
    order = list(range(len(ids)))
    random.Random(2).shuffle(order)
    plan: dict[str, int] = {}
    rules: list[dict[str, Any]] = []
    for slot, i in enumerate(order[:n_faulty]):
        kind = slot % len(TRAINER_FAULTS)
        plan[ids[i]] = kind
        rules.append({**TRAINER_FAULTS[kind][1], "match": hashes[ids[i]]})
    state, store, mark = work / "trainer-state", work / "trainer-store", uuid.uuid4().hex
    env = bench_env(mark, rules, state)
    extra = ["--stages", ",".join(TRAINER_STAGES), "--num-cpus", "2", "--timeout", TIMEOUT]
    extra += ["--memory-limit", "2", "--retries", "2"]  # the Trainer's libraries need > 1 GiB
    start = time.monotonic()
    proc = hfsweep_run(catalog, store, "trainer", *extra, env=env, timeout=3600)
    seconds = time.monotonic() - start
    orphans_after = left_behind(mark)
    rows = read_rows(store, "trainer")
    counts = pair_counts(rows)
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault(r["model_id"], {})[r["stage"]] = r
    spawned = [int(p.name.split("-")[1]) for p in state.glob("spawned-*")]
    fired = faults.fired(str(state)) if state.is_dir() else []
    lines = [Line(label) for label, *_ in TRAINER_FAULTS]
    healthy = Line("trainer: (healthy models beside them)")
    for model in ids:
        kind = plan.get(model)
        line = healthy if kind is None else lines[kind]
        last = "pass" if kind is None else TRAINER_FAULTS[kind][2]
        expected = {**{s: ("pass", 1) for s in TRAINER_STAGES[:-1]}, "trainer": (last, 1)}
        line.trials += 1
        got = by_model.get(model, {})
        lost = sum(1 for s in TRAINER_STAGES if counts[(model, s)] == 0)
        dup = sum(counts[(model, s)] - 1 for s in TRAINER_STAGES if counts[(model, s)] > 1)
        ok_rows = all(
            s in got and (got[s]["status"], got[s]["attempt"]) == expected[s]
            for s in TRAINER_STAGES
        )
        mislabelled = sum(
            1
            for s in TRAINER_STAGES
            if s in got and got[s]["status"] != "pass" and got[s]["status"] != expected[s][0]
        )
        line.lost += lost
        line.duplicated += dup
        line.mislabelled += mislabelled
        survived = ok_rows and not lost and not dup
        line.survived += int(survived)
        if not survived:
            seen = {
                s: (r["status"], r["attempt"], r["error_type"], (r["error_message"] or "")[:300])
                for s, r in got.items()
            }
            print(f"{line.fault}: {model} expected {expected}, got {seen}", file=sys.stderr)
    whole = Line("trainer: (the sweep: driver exit, processes left)")
    whole.trials = 1
    # the models' processes and what the hang started, besides what carries the bench's mark
    whole.orphans = len(orphans_after) + len(wait_all_dead([*fired, *spawned], 2.0))
    whole.survived = int(proc.returncode == 0 and not whole.orphans and bool(spawned))
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    print(f"trainer section: {len(ids)} models in {seconds:.0f} s", file=sys.stderr)
    return [*lines, healthy, whole]


# ---- main --------------------------------------------------------------------------------


ALL_SECTIONS = "model,node,env,kill,ops,ops-env,ops-kill,group,trainer"
FAST_SECTIONS = "model,node,env,kill,ops"
# `--fast`'s kill section: its SIGTERM and its one SIGKILL need a run that is under way, not a
# long one (the second and the last model hold it open); each model more is a second of CPU in
# CI, and each kill more a driver, an embedded Ray and its worker started again (about 20 s of
# CPU)
KILL_MODELS_FAST = 6


def run(
    sections: list[str], trials: int, kills: int, seed: int, work: Path, fast: bool = False
) -> list[Line]:
    lines: list[Line] = []
    for name in sections:
        start = time.monotonic()
        if name == "model":
            lines += section_model(trials, work)
        elif name == "node":
            lines += section_node(trials, work)
        elif name == "env":
            lines += section_env(trials, work)
        elif name == "kill":
            lines += section_kill(
                kills, work, seed, KILL_MODELS_FAST if fast else max(50, 25 * kills), fast
            )
        elif name == "ops":
            lines += section_ops(trials, work)
        elif name == "ops-env":
            lines += section_ops_env(trials, work)
        elif name == "ops-kill":
            lines += section_ops_kill(kills, work, seed)
        elif name == "group":
            lines += section_group(trials, work)
        elif name == "trainer":
            lines += section_trainer(trials, work)
        else:
            raise SystemExit(f"unknown section {name!r}")
        print(f"[{name}: {time.monotonic() - start:.0f} s]", file=sys.stderr)
    return lines


def table(lines: list[Line]) -> str:
    head = f"{'fault':<48} {'trials':>6} {'survived':>8} {'lost':>5} {'dup':>5} {'orphans':>7} {'mislabelled':>11}"
    out = [head, "-" * len(head)]
    for ln in lines:
        out.append(
            f"{ln.fault:<48} {ln.trials:>6} {ln.survived:>8} {ln.lost:>5} {ln.duplicated:>5} "
            f"{ln.orphans:>7} {ln.mislabelled:>11}"
        )
    total = Line(
        "total",
        *(
            sum(getattr(ln, f) for ln in lines)
            for f in ("trials", "survived", "lost", "duplicated", "orphans", "mislabelled")
        ),
    )
    out.append("-" * len(head))
    out.append(
        f"{total.fault:<48} {total.trials:>6} {total.survived:>8} {total.lost:>5} "
        f"{total.duplicated:>5} {total.orphans:>7} {total.mislabelled:>11}"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections",
        help="comma-separated (default: all; with --fast: model,node,env,kill,ops, the op "
        "sweep's env and kill trials being tests of their own: tests/test_op_sweep_faults.py)",
    )
    parser.add_argument("--trials", type=int, default=20, help="trials per fault type")
    parser.add_argument("--kills", type=int, default=30, help="kill-and-resume trials")
    parser.add_argument("--fast", action="store_true", help="1 trial per fault type, 1 kill (CI)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the lines here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="run beside N CPU-bound processes (busy loops started here, stopped at the end)",
    )
    args = parser.parse_args(argv)
    trials, kills = (1, 1) if args.fast else (args.trials, args.kills)
    if args.sections is None:
        args.sections = FAST_SECTIONS if args.fast else ALL_SECTIONS
    work = Path(tempfile.mkdtemp(prefix="hfsweep-faults-"))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    started = time.monotonic()
    try:
        lines = run(args.sections.split(","), trials, kills, args.seed, work, args.fast)
    finally:
        for proc in busy:  # only the loops started here
            proc.kill()
            proc.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if busy:
        print(f"beside {len(busy)} CPU-bound processes ({time.monotonic() - started:.0f} s)")
    print(table(lines))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(ln) for ln in lines], indent=1))
    bad = [
        ln
        for ln in lines
        if ln.survived != ln.trials or ln.lost or ln.duplicated or ln.orphans or ln.mislabelled
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
