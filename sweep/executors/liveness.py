"""Signs of life of Ray tasks: what is slow is not lost.

A task's body, on its worker, says it is alive every `BEAT_S` seconds under a key of its own in
Ray's key-value store (`beating`); the driver reads the keys of the tasks it has not heard from
(`read_beats`). A task is given up as lost only when nothing of it shows life for `GUARD_S`
(`sweep.executors.ray_cluster`), never because a loaded machine runs it slowly.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

BEAT_S = 5.0  # how often a task's worker says it is alive
GUARD_S = 300.0  # silence after which a task is taken for lost (a wedged worker or node)
NAMESPACE = "hfsweep"


def beating(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The body of a task on a worker: while it runs, a thread says so under `key` in Ray's
    key-value store every `BEAT_S` seconds (a worker that is slow still beats)."""

    def body(key: bytes, *args: Any) -> Any:
        stop = threading.Event()

        def beat() -> None:
            from ray.experimental.internal_kv import internal_kv_get_gcs_client

            count = 0
            while True:
                count += 1
                with contextlib.suppress(Exception):
                    client = internal_kv_get_gcs_client()
                    client.internal_kv_put(
                        key, str(count).encode(), True, NAMESPACE.encode(), timeout=BEAT_S
                    )
                if stop.wait(BEAT_S):
                    return

        thread = threading.Thread(target=beat, daemon=True, name="task-beat")
        thread.start()
        try:
            return fn(*args)
        finally:
            stop.set()
            thread.join(1.0)
            with contextlib.suppress(Exception):  # the task is over: its key goes
                from ray.experimental.internal_kv import internal_kv_get_gcs_client

                client = internal_kv_get_gcs_client()
                client.internal_kv_del(key, False, NAMESPACE.encode(), timeout=BEAT_S)

    return body


def read_beats(keys: list[bytes], timeout_s: float) -> dict[bytes, bytes] | None:
    """The tasks' last beats, by key ({}: no cluster client in this process, a stand-in
    cluster in tests; None: the cluster's store did not answer within `timeout_s`)."""
    from ray.experimental.internal_kv import internal_kv_get_gcs_client

    client = internal_kv_get_gcs_client()
    if client is None:
        return {}
    try:
        found = client.internal_kv_multi_get(keys, NAMESPACE.encode(), timeout=timeout_s)
    except Exception:
        return None
    return dict(found or {})
