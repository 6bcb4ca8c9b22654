"""Shared fixtures. Tests are offline: the Hub is never contacted, no weights are downloaded.

The suite runs on several pytest-xdist workers (`scripts/test.sh`; docs/testing.md). Each
process of a run (the controller and every worker) gets its own temp folder (TMPDIR,
RAY_TMPDIR, HFSWEEP_CACHE), set in `pytest_configure` before any test starts and inherited by
every `hfsweep` or `ray start` a test runs: no two workers share a Ray session folder, the
`ray_current_cluster` file that a bare `ray.init()` reads, the registry of live children, or
a cache.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# torch single-threaded in every process of the suite (the workers, and the commands, Ray nodes
# and children they start, which inherit it): the models are tiny, and three workers with their
# children share two cores, where OpenMP's threads spend their time waiting on one another
# (tests/test_shrink_transformers.py and tests/test_families_audio.py on a busy machine: 119 CPU
# s with two threads, 45 with one). A model's own process sets its own (`ModelSettings.threads`).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
if "torch" in sys.modules:  # imported before this file (by a plugin): too late for the variable
    sys.modules["torch"].set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
HFSWEEP = [sys.executable, "-m", "sweep"]
# A config.json for `hfsweep check PATH`: a llama small enough to run every stage in seconds.
TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}

# The xdist group of the tests that use `ray_session`: one worker runs them all, so a run of
# the suite starts one embedded Ray for them, not one per worker.
RAY_GROUP = pytest.mark.xdist_group("ray_session")
_OWN_TMP: list[str] = []


def worker_id() -> str:
    """This process's pytest-xdist worker ("gw0", "gw1", ...), or "main" without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.hookimpl(trylast=True)  # after pytest's own temp-path set-up
def pytest_configure(config: pytest.Config) -> None:
    """This process's own temp folder, for it and everything its tests start: TMPDIR (the
    registry of live children that runners/containment.py sweeps is a folder there, and
    another worker's sweep must not kill what this worker's test left on purpose),
    RAY_TMPDIR (Ray's session folders and `ray_current_cluster`; a short path, as Ray's unix
    sockets live under it) and HFSWEEP_CACHE."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        factory.getbasetemp()  # pytest's own tmp_path root stays where it was
    # xdist's workers inherit the controller's TMPDIR: make theirs beside it, not inside it
    root = os.environ.setdefault("HFSWEEP_TEST_TMPROOT", tempfile.gettempdir())
    own = tempfile.mkdtemp(prefix=f"hfsweep-{worker_id()}-", dir=root)
    _OWN_TMP.append(own)
    os.environ.update(TMPDIR=own, RAY_TMPDIR=own, HFSWEEP_CACHE=os.path.join(own, "cache"))
    tempfile.tempdir = None  # `tempfile.gettempdir()` reads TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    # Removed at exit after multiprocessing's own clean-up of the folder it made inside (its
    # finalizers run at priority -100; a lower one runs after them), not before it.
    from multiprocessing.util import Finalize

    for path in _OWN_TMP:
        Finalize(
            None, shutil.rmtree, args=(path,), kwargs={"ignore_errors": True}, exitpriority=-101
        )


def ray_address_file() -> Path:
    """The file where `ray start` leaves its address for a bare `ray.init()` (Ray's own
    function; under this process's RAY_TMPDIR)."""
    from ray._common.utils import get_ray_address_file

    return Path(get_ray_address_file(None))


def forget_cluster(port: int | str) -> None:
    """Remove the address file a test's `ray start` on `port` left behind (and only that one)."""
    current = ray_address_file()
    try:
        if current.read_text().strip().endswith(f":{port}"):
            current.unlink()
    except OSError:
        pass


@pytest.hookimpl(trylast=True)  # after xdist's own hook (see `_group_by_node_id`)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `ray_session` users first, one after another (one Ray serves them all; on several
    workers they go to one worker: RAY_GROUP), then the `slow` tests (each in the order
    collected), so that on several workers the longest ones start at once and the many short
    ones fill in around them."""
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(RAY_GROUP)
    items.sort(
        key=lambda item: (
            "ray_session" not in getattr(item, "fixturenames", ()),
            item.get_closest_marker("slow") is None,
        )
    )
    _name_params_in_node_ids(items)
    if getattr(config.option, "loadgroup", False):  # set on xdist workers by `--dist loadgroup`
        _group_by_node_id(items)
    seen = Counter(item.nodeid for item in items)
    if twice := sorted(nodeid for nodeid, n in seen.items() if n > 1):
        # xdist's scheduler keeps one test per node id: the others would silently never run
        raise pytest.UsageError(f"{len(twice)} node ids name more than one test: {twice[:5]}")


def _name_params_in_node_ids(items: list[pytest.Item]) -> None:
    """Give a test whose name carries "[params]" that its node id lacks those params in its id.

    pytest 9.2 builds a test's node id from its original name and its `parametrize` callspec
    only; schemathesis (tests/test_dashboard_fuzz.py) makes one test per API operation named
    `test[GET /api/...]` without a callspec, so all of them got one node id, and xdist ran one
    of them. Their ids become what the names say, as before pytest 9.2."""
    from _pytest.nodeid import NodeId

    for item in items:
        name, nodeid = item.name, item.nodeid
        if name.endswith("]") and "[" in name and not nodeid.endswith("]"):
            item._id = NodeId.parse(f"{nodeid}[{name[name.index('[') + 1 : -1]}]")


def _group_by_node_id(items: list[pytest.Item]) -> None:
    """What `--dist loadgroup` does, done where pytest 9.2 reads it.

    pytest-xdist 3.8 tells its controller a test's group by appending "@<group>" to the node id
    a worker reports; it writes `item._nodeid`, which pytest 9.2 no longer reads (node ids are
    structured: `item._id`), so every group is silently ignored (pytest-dev/pytest-xdist#1386).
    This appends the same suffix to the structured id, unless xdist's own already did."""
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        if not names:
            continue
        suffix = "@" + "_".join(names)
        nodeid = item.nodeid
        if nodeid.endswith(suffix):
            continue
        if nodeid.rfind("@") > max(nodeid.rfind("]"), nodeid.rfind("::")):
            nodeid = nodeid[: nodeid.rfind("@")]  # a suffix from before RAY_GROUP was added
        item._id = NodeId.parse(nodeid + suffix)


@pytest.fixture
def ray_session():
    """One embedded Ray for the tests that use it (each start costs seconds of CPU): they share
    one xdist worker (RAY_GROUP) and run one after another there; it stops after the last of
    them (`pytest_runtest_teardown`), since an idle Ray takes a few percent of a core."""
    import ray

    from sweep.executors.ray_cluster import start_embedded

    if not ray.is_initialized():
        start_embedded(
            lambda: ray.init(
                address="local", num_cpus=2, include_dashboard=False, log_to_driver=False
            )
        )
    return ray


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the embedded Ray of `ray_session` once the next test does not use it (a later
    user would start it again)."""
    uses = lambda it: it is not None and "ray_session" in getattr(it, "fixturenames", ())  # noqa: E731
    if uses(item) and not uses(nextitem):
        import ray

        ray.shutdown()


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session (tests/browser_support.py); each test opens its
    own page (a fresh browser context) and closes it."""
    from tests.browser_support import chromium

    with chromium() as b:
        yield b


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


def write_catalog(path: Path, rows: list[dict]) -> Path:
    """A small catalog CSV in the bundled snapshot's columns (ranked in list order)."""
    from model_configs.catalog import entry_from_row
    from model_configs.catalog import write_catalog as write

    entries = [
        entry_from_row(
            {"rank": str(i), "downloads_30d": str(1000 // i), **{k: str(v) for k, v in row.items()}}
        )
        for i, row in enumerate(rows, start=1)
    ]
    write(entries, path)
    return path
