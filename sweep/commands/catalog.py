"""`hfsweep catalog`: show the catalog, or refresh it from the Hub."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="list the top models of a catalog")
    show.add_argument("--catalog", default="bundled")
    show.add_argument("--top", type=int, default=20)
    refresh = sub.add_parser("refresh", help="build a catalog from the live Hub")
    refresh.add_argument("--top", type=int, default=1000)
    refresh.add_argument(
        "--out",
        default=None,
        help="catalog CSV to write (default: <cache>/catalogs/hub-<date>.csv)",
    )
    refresh.add_argument(
        "--no-configs",
        action="store_true",
        help="do not fetch the models' config files",
    )


def run(args: argparse.Namespace) -> int:
    from ground import settings
    from ground.errors import UsageError
    from model_configs.catalog import load_catalog
    from model_configs.catalog_refresh import refresh_catalog

    if args.action == "show":
        catalog = load_catalog(args.catalog)
        print(f"# {catalog.name}: {len(catalog.entries)} models", file=sys.stderr)
        print(f"{'rank':>5}  {'downloads':>12}  {'library':<22} {'model_type':<18} model_id")
        for e in catalog.top(args.top):
            print(
                f"{e.rank:>5}  {e.downloads or 0:>12,}  {e.library or '-':<22} "
                f"{e.model_type_hint or '-':<18} {e.model_id}"
            )
        return 0
    if settings.hub_offline():
        raise UsageError(
            "the Hub is offline (HF_HUB_OFFLINE=1): cannot refresh the catalog",
            hint="unset HF_HUB_OFFLINE, or use --catalog bundled",
        )
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    import datetime as dt

    out = (
        Path(args.out)
        if args.out
        else (settings.cache_dir() / "catalogs" / f"hub-{dt.date.today().isoformat()}.csv")
    )

    def progress(n: int) -> None:
        if n % 100 == 0 or n == args.top:
            print(f"catalog: {n}/{args.top}", file=sys.stderr, flush=True)

    catalog = refresh_catalog(
        args.top,
        out,
        fetch_configs=not args.no_configs,
        token=settings.hub_token(),
        progress=progress,
    )
    import json

    counts = json.loads(out.with_suffix(".json").read_text()).get("configs") or {}
    summary = ", ".join(f"{status} {n}" for status, n in counts.items()) or "none fetched"
    print(
        f"wrote {out} ({len(catalog.entries)} models; configs in {catalog.config_dir}: {summary})",
        file=sys.stderr,
    )
    print(out)
    return 0
