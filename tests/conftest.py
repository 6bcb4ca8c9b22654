"""Shared fixtures. Tests are offline: the Hub is never contacted, no weights are downloaded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

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


@pytest.fixture(scope="session")
def ray_session():
    """One embedded Ray for the whole session (each start costs seconds)."""
    import ray

    from sweep.executors.ray_cluster import start_embedded

    if not ray.is_initialized():
        start_embedded(
            lambda: ray.init(
                address="local", num_cpus=2, include_dashboard=False, log_to_driver=False
            )
        )
    yield ray
    ray.shutdown()


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
