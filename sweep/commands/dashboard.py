"""`hfsweep dashboard`: serve the web dashboard over a store (works offline)."""

from __future__ import annotations

import argparse
import ipaddress
import sys

from sweep.commands.options import add_store_argument


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_argument(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        help="seconds between listings of the store for new results (default 2)",
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from dashboard.app import create_app
    from reports.errors import UsageError

    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be between 1 and 65535, not {args.port}")
    if not is_loopback(args.host):
        print(
            f"warning: listening on {args.host}: anyone who can reach this machine can read the "
            "store through the dashboard (it has no login); the default is 127.0.0.1",
            file=sys.stderr,
        )
    app = create_app(args.store, refresh_s=args.refresh)
    print(f"hfsweep dashboard on http://{args.host}:{args.port} (store {args.store})")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
