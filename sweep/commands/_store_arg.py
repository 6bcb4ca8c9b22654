"""The `--store` option shared by the reading commands."""

from __future__ import annotations

import argparse

from reports import settings


def add_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=settings.default_store(),
        help="results folder or URI (default: $HFSWEEP_STORE or ./hfsweep-store)",
    )
