"""The `--store` option shared by the reading commands, and the checks of what it names: a
store to read must be a folder that exists (or a URI); one to write into must not be a file.
Both answer one clear error (exit 2) before any heavy import."""

from __future__ import annotations

import argparse
from pathlib import Path

from reports import settings
from reports.errors import UsageError


def add_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=settings.default_store(),
        help="results folder or URI (default: $HFSWEEP_STORE or ./hfsweep-store)",
    )


def _local(root: str) -> Path | None:
    """The folder a store root names, None for an object-store URI (checked when opened)."""
    if "://" in root and not root.startswith("file://"):
        return None
    return Path(root.removeprefix("file://")).expanduser()


def store_to_read(root: str) -> str:
    """`root`, if it can hold results to read: a folder that exists, or a URI."""
    path = _local(root)
    if path is None:
        return root
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"--store {root!r} is a file, not a store folder",
            hint="give the folder `hfsweep run --store` wrote (it holds results/ and runs/)",
        )
    if not path.exists():
        raise UsageError(
            f"--store {root!r}: no such folder",
            hint="give the folder `hfsweep run --store` wrote (default: $HFSWEEP_STORE or "
            "./hfsweep-store), or run `hfsweep run` first",
        )
    return root


def store_to_write(root: str) -> str:
    """`root`, if a run can write into it: a folder (created if missing) or a URI, not a file."""
    path = _local(root)
    if path is not None and path.exists() and not path.is_dir():
        raise UsageError(
            f"--store {root!r} is a file, not a store folder",
            hint="give a folder (it is created if missing) or a URI such as s3://bucket/prefix",
        )
    return root
