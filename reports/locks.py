"""One driver per run: a lock on the run id, so two drivers never write rows into one run.

- A local store takes an exclusive `flock` on `STORE/.locks/run_id=<id>.lock`. The kernel
  releases it when the holder dies, however it dies, so a killed driver's rerun goes straight on.
  A forked child (a model's or an op's process) shares its parent's open file, and with it the
  lock, until the child closes it: every child closes the held locks' files as it is forked,
  or a child still dying after its killed driver would refuse that driver's rerun.
- An object store has no locks: the driver keeps a lease object `STORE/.locks/run_id=<id>.json`
  (holder, heartbeat) fresh every few seconds. Another driver is refused while the lease is
  fresh, unless the holder is a dead process on this very host; a stale lease is taken over.
  After writing its lease a driver reads it back, so of two racing drivers exactly one wins.
Hidden names: readers of the store never see either.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from ground.errors import StoreError, UsageError, first_line

LEASE_S = 30.0  # a lease not refreshed for this long is stale (its driver is gone)
HEARTBEAT_S = 5.0
# A read of the lease that fails for another reason than its absence (a dropped connection, a
# 5xx, an object replaced while it was read) is tried again this often, then is a StoreError:
# taking a failed read for "no lease" would let a second driver into a held run.
READ_ATTEMPTS = 4
READ_BACKOFF_S = 0.25

# The files of the flocks this process holds: a forked child closes them (`_close_in_child`).
_HELD_FDS: set[int] = set()


def _close_in_child() -> None:
    for fd in _HELD_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_FDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class RunLocked(UsageError):
    """Another driver is writing this run."""


def _holder() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "token": uuid.uuid4().hex,
        "since": time.time(),
        "heartbeat": time.time(),
    }


def _refused(run_id: str, holder: dict[str, Any], extra: str = "") -> RunLocked:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since") or 0))
    return RunLocked(
        f"run {run_id} is being written by another driver "
        f"({holder.get('host')}, pid {holder.get('pid')}, since {since}){extra}",
        hint="wait for it to finish, or start a new run without --run-id",
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """`with RunLock(store, run_id):` holds the run for this process (raises `RunLocked`)."""

    def __init__(self, store: Any, run_id: str):
        self.store, self.run_id = store, run_id
        self.folder = f"{store.root}/.locks"
        self.holder = _holder()
        self._fd: int | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # ---- local: flock ----------------------------------------------------------------------

    def _lock_local(self) -> None:
        import fcntl

        os.makedirs(self.folder, exist_ok=True)
        path = f"{self.folder}/run_id={self.run_id}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            os.close(fd)
            raise _refused(self.run_id, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.holder).encode(), 0)
        self._fd = fd
        _HELD_FDS.add(fd)

    # ---- object store: a lease -------------------------------------------------------------

    @property
    def _lease_path(self) -> str:
        return f"{self.folder}/run_id={self.run_id}.json"

    def _read_lease(self) -> dict[str, Any] | None:
        """The lease, or None where there is none. Any other failure is retried, then raised."""
        fs = self.store.fs
        for attempt in range(READ_ATTEMPTS):
            try:
                with fs.open_input_stream(self._lease_path) as fh:
                    return dict(json.loads(fh.read() or b"{}"))
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as exc:
                failure = exc
                if attempt + 1 < READ_ATTEMPTS:
                    time.sleep(READ_BACKOFF_S * 2**attempt)  # 0.25, 0.5, 1 s
        raise StoreError(
            f"cannot read the lease of run {self.run_id} at {self._lease_path!r} "
            f"({READ_ATTEMPTS} tries): {first_line(failure)}",
            run_id=self.run_id,
            hint="check the object store's endpoint and the AWS_* variables, then rerun with "
            "the same --run-id",
        ) from failure

    def _write_lease(self) -> None:
        self.holder["heartbeat"] = time.time()
        fs = self.store.fs
        with fs.open_output_stream(self._lease_path) as fh:
            fh.write(json.dumps(self.holder).encode())

    def _lock_remote(self, settle_s: float = 1.0) -> None:
        with contextlib.suppress(OSError):
            self.store.fs.create_dir(self.folder, recursive=True)
        lease = self._read_lease()
        if lease and not self._stale(lease):
            age = time.time() - float(lease.get("heartbeat") or 0)
            raise _refused(self.run_id, lease, f"; its lease was renewed {age:.0f} s ago")
        self._write_lease()
        time.sleep(settle_s)  # a racing driver's lease lands in this window: read back
        lease = self._read_lease()
        if not lease or lease.get("token") != self.holder["token"]:
            raise _refused(self.run_id, lease or {})
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="run-lease")
        self._beat.start()

    def _stale(self, lease: dict[str, Any]) -> bool:
        if time.time() - float(lease.get("heartbeat") or 0) > LEASE_S:
            return True
        same_host = lease.get("host") == socket.gethostname()
        return same_host and not _pid_alive(int(lease.get("pid") or 0))

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                self._write_lease()

    # ---- both ------------------------------------------------------------------------------

    def __enter__(self) -> RunLock:
        if self.store.local:
            self._lock_local()
        else:
            self._lock_remote()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            if self._fd in _HELD_FDS:  # not in a forked child: it closed the file when forked
                _HELD_FDS.discard(self._fd)
                os.close(self._fd)  # releases the flock
            self._fd = None
        if self._beat is not None:
            self._stop.set()
            self._beat.join(timeout=HEARTBEAT_S)
            # Where the lease cannot be read or deleted now, it goes stale after LEASE_S.
            with contextlib.suppress(OSError, StoreError):
                lease = self._read_lease()
                if lease and lease.get("token") == self.holder["token"]:
                    self.store.fs.delete_file(self._lease_path)
