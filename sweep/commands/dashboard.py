"""`hfsweep dashboard`: serve the web dashboard over a store (works offline).

What can be checked without the web stack is checked first, in milliseconds: the store must be a
folder that exists (or a URI), and the port is bound here, before uvicorn and the app are
imported: one taken by another process is one clear error (exit 2), and the server then serves
on the very socket that was bound (no window for another process to take it).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
import sys

from ground.errors import UsageError
from sweep.commands.options import add_store_argument, catalog_models, store_to_read


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_argument(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument(
        "--catalog",
        default="bundled",
        help="the catalog a model page with no results searches: its rank, the ids meant "
        "(default bundled)",
    )
    p.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        help="seconds between listings of the store for new results (default 2)",
    )


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be between 1 and 65535, not {args.port}")
    store_to_read(args.store)
    sock = bind(args.host, args.port)
    if not is_loopback(args.host):
        print(
            f"warning: listening on {args.host}: anyone who can reach this machine can read the "
            "store through the dashboard (it has no login); the default is 127.0.0.1",
            file=sys.stderr,
        )
    import uvicorn

    from dashboard.app import create_app

    catalog = catalog_models(args.catalog)
    app = create_app(args.store, refresh_s=args.refresh, catalog=catalog)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"hfsweep dashboard on http://{host}:{args.port} (store {args.store})")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])
    return 0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port`, or a UsageError saying why not (the port is taken,
    the address is not this machine's, the host does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host!r} does not resolve: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is already in use",
                hint="stop what listens there, or pick another port with --port",
            ) from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
