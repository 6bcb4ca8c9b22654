"""The nightly recipes of docs/nightly.md, run as written there as far as this machine allows:
the cron line (its schedule checked, its command run by /bin/sh in cron's near-empty
environment and the `AWS_*` variables the page says an s3:// store needs, one night into its
log) and the `ray job submit` example (on a head node started here, with its dashboard, on
loopback and free ports, token auth), as the night after the cron line's, on the same store (a
local S3-compatible server, one for the module). What is changed is said where it is: paths,
`--top 2 --stages load`, one Ray worker (`--num-cpus 1` on the cron line, on the head), the Hub
offline, and a model made to fail in the job's night (the fault hook), which must end that
night with exit 4 and name the model. The two tests share the cron line's night (one night, two
readers), so the module runs on one xdist worker."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reports.store import Store
from tests.conftest import HFSWEEP, ROOT, forget_cluster
from tests.s3_support import BUCKET, local_s3

# the cron line's night, run once for the module, is the job's previous night
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nightly_recipes")]

PAGE = (ROOT / "docs" / "nightly.md").read_text()
STORE = f"s3://{BUCKET}/nightly"  # both recipes' store: the job's night follows the cron line's
SECOND = "Falconsai/nsfw_image_detection"  # the bundled catalog's second model
FAIL_SECOND = json.dumps([{"at": "plan", "match": SECOND, "fault": "raise"}])
SMALL = "--top 2 --stages load"
# the cron night's embedded Ray with one worker (one interpreter importing torch, not one per
# core): its start in cron's environment is under test, not its concurrency
CRON_SMALL = f"{SMALL} --num-cpus 1"


def fenced(language: str) -> list[str]:
    """The lines of the page's first fenced block in `language`."""
    match = re.search(rf"```{language}\n(.*?)```", PAGE, re.S)
    assert match, f"no ```{language} block in docs/nightly.md"
    return [line for line in match.group(1).splitlines() if line.strip()]


def substitute(line: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in line, f"the page's line no longer has {old!r}: {line}"
        line = line.replace(old, new)
    return line


# ---- cron ------------------------------------------------------------------------------------

FIELDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]  # minute hour day month weekday


def valid_cron_field(text: str, low: int, high: int) -> bool:
    for item in text.split(","):
        base, _, step = item.partition("/")
        if step and not (step.isdigit() and int(step) > 0):
            return False
        if base == "*":
            continue
        first, _, last = base.partition("-")
        numbers = [first, last] if last else [first]
        if not all(n.isdigit() and low <= int(n) <= high for n in numbers):
            return False
    return True


def test_valid_cron_field():
    assert valid_cron_field("30", 0, 59) and valid_cron_field("*/15", 0, 59)
    assert valid_cron_field("1-5", 0, 7) and valid_cron_field("0,12", 0, 23)
    assert not valid_cron_field("60", 0, 59) and not valid_cron_field("2h", 0, 23)
    assert not valid_cron_field("*/0", 0, 59)


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """One local S3-compatible server for the module: the store both recipes write."""
    with local_s3() as aws:
        yield aws


@pytest.fixture(scope="module")
def cron_night(s3, tmp_path_factory) -> dict:
    """The page's cron line, run once by /bin/sh in cron's environment (with the `AWS_*`
    variables the page says an s3:// store needs), one night into STORE and its log: what the
    cron test checks, and the previous night of the job's."""
    lines = [line for line in fenced("crontab") if not line.lstrip().startswith("#")]
    assert len(lines) == 1
    fields = lines[0].split(None, 5)
    assert len(fields) == 6, "five schedule fields and a command"
    home = tmp_path_factory.mktemp("cron")
    log = home / "nightly.log"
    command = substitute(
        fields[5],
        {
            "/opt/hfsweep": str(ROOT),
            "/var/lib/hfsweep/store": STORE,
            "/var/www/hfsweep": str(home / "site"),
            "/var/log/hfsweep/nightly.log": str(log),
            "--top 10000": CRON_SMALL,
        },
    )
    cron_env = {
        "HOME": str(home),
        "LOGNAME": "hfsweep",
        "SHELL": "/bin/sh",
        "PATH": "/usr/bin:/bin",
        # not cron's: no Hub here; the checkout under test, whatever the venv was installed from
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "RAY_USAGE_STATS_ENABLED": "0",
        **s3,  # set in the crontab, as the page says for an s3:// store
    }
    proc = subprocess.run(["/bin/sh", "-c", command], env=cron_env, cwd=home, timeout=900)
    return {"fields": fields, "returncode": proc.returncode, "log": log, "site": home / "site"}


def test_the_docs_cron_line_runs_a_night_into_its_log(cron_night):
    for text, (low, high) in zip(cron_night["fields"][:5], FIELDS, strict=True):
        assert valid_cron_field(text, low, high), f"bad cron field {text!r}"
    # One night: the line's schedule, shell, paths and redirection are what is under test here.
    # What a second night adds (the diff, the alert, exit 4) is tests/test_nightly.py's, and
    # the `ray job submit` recipe below ends this series that way too.
    log, site = cron_night["log"], cron_night["site"]
    assert cron_night["returncode"] == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "the series' first night" in text
    assert "site: " in text and (site / "index.html").is_file()
    assert json.loads((site / "nightly.json").read_text())["alert"] is False


# ---- ray job submit ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MARK = "HFSWEEP_TEST_JOB_CLUSTER"
RAY_START_TRIES = 3  # as the driver tries an embedded Ray's start


def kill_marked(value: str) -> None:
    """SIGKILL the processes whose environment has MARK=value and everything below them: what
    this test's `ray start` started (never `ray stop`, which stops every Ray on the machine)."""
    needle = f"{MARK}={value}".encode()
    parents: dict[int, list[int]] = {}
    roots = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(pid)
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                roots.append(pid)
    todo, seen = list(roots), set()
    while todo:
        pid = todo.pop()
        if pid not in seen and pid != os.getpid():
            seen.add(pid)
            todo += parents.get(pid, [])
    for pid in seen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def head_with_dashboard(s3, cron_night):
    """A Ray head on loopback with its dashboard (job server), token auth, free ports, and
    hfsweep on its PATH, inside the module's S3-compatible server's variables; started only
    once the cron line's night, the job's previous night, has run."""
    assert cron_night["returncode"] == 0, cron_night["log"].read_text()[-3000:]
    ray_bin = Path(HFSWEEP[0]).with_name("ray")
    env = {
        **os.environ,
        **s3,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "PATH": f"{ray_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        MARK: secrets.token_hex(8),
    }
    env.pop("HFSWEEP_TEST_FAULTS", None)
    port = dashboard = agent = 0

    def start() -> subprocess.CompletedProcess:
        nonlocal port, dashboard, agent
        port, dashboard, agent = free_port(), free_port(), free_port()
        argv = [
            str(ray_bin),
            "start",
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",  # one worker for the night's models: concurrency is not the point
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            # the defaults may be taken by another Ray on this machine
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            "--disable-usage-stats",
        ]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)

    try:
        for _ in range(RAY_START_TRIES):
            proc = start()
            # Ray's fixed 30 s for the raylet to register, missed on a busy machine: the
            # machine's problem, not the recipe's; start again (as the driver does for an
            # embedded Ray, sweep/executors/ray_cluster.py: start_embedded)
            if proc.returncode == 0 or "timed out during startup" not in proc.stderr:
                break
            kill_marked(env[MARK])
            forget_cluster(port)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # the job agent (what `ray job submit` is handed to) starts after `ray start` returns;
        # wait for its port here, not by submitting again (each `ray job submit` an interpreter)
        listening(agent)
        yield {k: v for k, v in env.items() if k != MARK}, dashboard
    finally:
        kill_marked(env[MARK])
        forget_cluster(port)


def listening(port: int) -> None:
    """Return once something listens on loopback `port` (the deadline is a guard against a
    hang, not a speed: `submit` tries again past it)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with socket.socket() as s, contextlib.suppress(OSError):
            s.connect(("127.0.0.1", port))
            return
        time.sleep(1)


def submit(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`ray job submit`, again while the head's job agent is still starting (for as long as
    that takes: the deadline is a guard against a hang, not a speed)."""
    deadline = time.monotonic() + 900
    while True:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        if "No available agent" not in proc.stdout + proc.stderr:
            return proc
        if time.monotonic() > deadline:
            return proc
        time.sleep(5)


def test_the_docs_ray_job_fails_on_a_regression(tmp_path, head_with_dashboard):
    """The job after the cron line's night on the same store (the series' previous night) finds
    the model that regressed: the job fails with exit 4, and `ray job status` says so."""
    env, dashboard = head_with_dashboard
    lines = [line for line in PAGE.splitlines() if line.startswith("ray job submit ")]
    assert len(lines) == 1
    status_line = next(line for line in PAGE.splitlines() if line.startswith("ray job status "))
    argv = shlex.split(
        substitute(
            lines[0],
            {
                "HEAD_IP:8265": f"127.0.0.1:{dashboard}",
                "--top 10000": SMALL,
                "s3://bucket/hfsweep": STORE,
                "/shared/hfsweep-site": str(tmp_path / "site"),
            },
        )
    )
    argv[0] = str(Path(HFSWEEP[0]).with_name("ray"))
    command = argv[argv.index("--") + 1 :]
    assert command[:4] == ["hfsweep", "nightly", "--address", "auto"], command

    faults = json.dumps({"env_vars": {"HFSWEEP_TEST_FAULTS": FAIL_SECOND}})
    second = submit([*argv[:3], "--runtime-env-json", faults, *argv[3:]], env)
    out = second.stdout + second.stderr
    assert second.returncode != 0, out[-3000:]
    assert "Job entrypoint command failed with exit code 4" in out, out[-3000:]
    assert f"{SECOND}: passed -> fail at load (RuntimeError)" in out
    job_id = re.search(r"Job '(raysubmit_\w+)' submitted", out)
    assert job_id, out[-2000:]
    status = shlex.split(status_line.split("#")[0].replace("JOB_ID", job_id.group(1)))
    status[0] = argv[0]
    status += ["--address", f"http://127.0.0.1:{dashboard}"]
    shown = subprocess.run(status, env=env, capture_output=True, text=True, timeout=120)
    assert f"Job '{job_id.group(1)}' failed" in shown.stdout + shown.stderr
    assert "Job entrypoint command failed with exit code 4" in shown.stdout + shown.stderr
    nights = Store(STORE).runs()  # the module's S3 variables are this process's too
    assert [r["nightly"] for r in nights] == ["neuron", "neuron"]
    assert all(r["status"] == "finished" for r in nights)
