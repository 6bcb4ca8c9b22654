"""A Hugging Face Hub on 127.0.0.1 for tests: real HTTP, the endpoints huggingface_hub calls,
and faults on demand.

Serves the model listing (`/api/models`, paginated with `Link` headers), model info
(`/api/models/{id}[/revision/{rev}]`), the file tree (`/api/models/{id}/tree/{rev}`) and files
(`HEAD`/`GET /{id}/resolve/{rev}/{path}`), with the Hub's error codes (`RepoNotFound`,
`GatedRepo`, `EntryNotFound`). `fault(...)` makes the next matching requests stall, fail with a
status (and headers such as `Retry-After`) or answer malformed JSON. Every request is logged in
`requests`, so a test can prove what was never asked for.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit


@dataclass
class Repo:
    repo_id: str
    files: dict[str, bytes]
    info: dict[str, Any] = field(default_factory=dict)  # downloads, tags, library_name...
    gated: bool = False

    @property
    def sha(self) -> str:
        digest = hashlib.sha1(self.repo_id.encode())
        for name in sorted(self.files):
            digest.update(name.encode() + self.files[name])
        return digest.hexdigest()


@dataclass
class Fault:
    """The next `times` requests whose `METHOD path` contains `match` get this instead."""

    match: str
    times: int
    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"error": "injected"}'
    stall_s: float = 0.0  # wait this long first (the client times out), then answer normally


class FakeHub:
    def __init__(self, *, page_size: int = 1000):
        self.repos: dict[str, Repo] = {}
        self.listing: list[str] = []  # repo ids, most downloaded first
        self.page_size = page_size
        self.requests: list[str] = []  # "METHOD /path?query"
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, "GET")

            def do_HEAD(self) -> None:
                hub._handle(self, "HEAD")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ---- set-up --------------------------------------------------------------------------

    def add(self, repo_id: str, files: dict[str, Any], *, listed: bool = True, **info: Any) -> Repo:
        """A repo; dict / list file contents are served as JSON, str as text, bytes as is."""
        encoded = {
            name: body
            if isinstance(body, bytes)
            else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
            for name, body in files.items()
        }
        gated = bool(info.pop("gated", False))
        repo = Repo(repo_id, encoded, info, gated)
        self.repos[repo_id] = repo
        if listed:
            self.listing.append(repo_id)
        return repo

    def fault(self, match: str, times: int = 1, **kw: Any) -> Fault:
        f = Fault(match, times, **kw)
        with self._lock:
            self.faults.append(f)
        return f

    def asked(self, needle: str) -> list[str]:
        return [r for r in self.requests if needle in r]

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._released.set()  # stalled handlers return at once
        self.server.shutdown()
        self.server.server_close()

    # ---- serving -------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        line = f"{method} {h.path}"
        with self._lock:
            self.requests.append(line)
            fault = next((f for f in self.faults if f.times > 0 and f.match in line), None)
            if fault is not None:
                fault.times -= 1
        try:
            if fault is not None and fault.stall_s:
                self._released.wait(fault.stall_s)
                fault = None  # then answer normally (the client has long given up)
            if fault is not None:
                self._send(h, method, fault.status, fault.body, fault.headers)
                return
            status, body, headers = self._route(method, h.path)
            self._send(h, method, status, body, headers)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        method: str,
        status: int,
        body: bytes,
        headers: dict[str, str],
    ) -> None:
        h.send_response(status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(body)))
        if "Content-Type" not in headers:
            h.send_header("Content-Type", "application/json")
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(body)

    def _route(self, method: str, raw: str) -> tuple[int, bytes, dict[str, str]]:
        parts = urlsplit(raw)
        path, query = unquote(parts.path), parse_qs(parts.query)
        if path == "/api/models":
            return self._list(query)
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :]
            if "/tree/" in rest:
                repo_id, _, tail = rest.partition("/tree/")
                return self._tree(repo_id, tail.split("/", 1)[0])
            repo_id = rest.partition("/revision/")[0]
            return self._info(repo_id)
        if "/resolve/" in path:
            repo_id, _, tail = path.lstrip("/").partition("/resolve/")
            _rev, _, filename = tail.partition("/")
            return self._file(repo_id, filename)
        return 404, b'{"error": "no such route"}', {}

    def _missing(self) -> tuple[int, bytes, dict[str, str]]:
        return 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}

    def _list(self, query: dict[str, list[str]]) -> tuple[int, bytes, dict[str, str]]:
        limit = int(query.get("limit", ["1000"])[0])
        start = int(query.get("cursor", ["0"])[0])
        ids = [i for i in self.listing if i in self.repos][: min(limit, len(self.listing))]
        page = ids[start : start + self.page_size]
        headers: dict[str, str] = {}
        if start + self.page_size < len(ids):
            kept = [(k, v) for k, vs in query.items() if k != "cursor" for v in vs]
            kept.append(("cursor", str(start + self.page_size)))
            nxt = f"{self.url}/api/models?{urlencode(kept)}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return 200, json.dumps([self._summary(self.repos[i]) for i in page]).encode(), headers

    def _summary(self, repo: Repo) -> dict[str, Any]:
        config = repo.files.get("config.json")
        try:
            cfg = json.loads(config) if config else {}
        except ValueError:
            cfg = {}
        cfg = cfg if isinstance(cfg, dict) else {}
        return {
            "id": repo.repo_id,
            "_id": repo.sha[:24],
            "modelId": repo.repo_id,
            "sha": repo.sha,
            "gated": "manual" if repo.gated else False,
            "private": False,
            "config": {k: cfg[k] for k in ("model_type", "architectures") if k in cfg},
            "siblings": [{"rfilename": name} for name in sorted(repo.files)],
            **repo.info,
        }

    def _info(self, repo_id: str) -> tuple[int, bytes, dict[str, str]]:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._missing()
        return 200, json.dumps(self._summary(repo)).encode(), {}

    def _tree(self, repo_id: str, _rev: str) -> tuple[int, bytes, dict[str, str]]:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._missing()
        entries = [
            {
                "type": "file",
                "oid": hashlib.sha1(body).hexdigest(),
                "size": len(body),
                "path": name,
            }
            for name, body in sorted(repo.files.items())
        ]
        return 200, json.dumps(entries).encode(), {}

    def _file(self, repo_id: str, filename: str) -> tuple[int, bytes, dict[str, str]]:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._missing()
        commit = {"X-Repo-Commit": repo.sha}
        if repo.gated:
            body = b'{"error": "Access to this model is restricted"}'
            return 403, body, {"X-Error-Code": "GatedRepo", **commit}
        if filename not in repo.files:
            return 404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound", **commit}
        body = repo.files[filename]
        etag = hashlib.sha1(body).hexdigest()
        return (
            200,
            body,
            {"ETag": f'"{etag}"', "Content-Type": "application/octet-stream", **commit},
        )
