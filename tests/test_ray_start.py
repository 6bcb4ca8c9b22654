"""Ray's startup timeout (a fixed 30 s for the raylet to register) is the machine's problem:
the embedded Ray is started again, and after the last try the user gets one clear error."""

from __future__ import annotations

import pytest

from ground.errors import SystemFaultError, is_environment_error
from sweep.executors.ray_cluster import start_embedded

TIMED_OUT = (
    "The current node timed out during startup. This could happen because some of the raylet "
    "failed to startup or the GCS has become overloaded."
)


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import ray

    calls: list[int] = []
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(1))
    return calls


def test_a_startup_timeout_is_retried(shutdowns: list[int]) -> None:
    starts: list[int] = []

    def start() -> None:
        starts.append(1)
        if len(starts) == 1:
            raise Exception(TIMED_OUT)

    start_embedded(start)
    assert (len(starts), len(shutdowns)) == (2, 1)  # the failed start was shut down, then one more


def test_timeouts_on_every_try_are_one_environment_error(shutdowns: list[int]) -> None:
    starts: list[int] = []

    def start() -> None:
        starts.append(1)
        raise Exception(TIMED_OUT)

    with pytest.raises(SystemFaultError, match="did not start") as raised:
        start_embedded(start, tries=3)
    assert len(starts) == 3 and len(shutdowns) == 3
    assert is_environment_error(raised.value) and "--local" in (raised.value.hint or "")


def test_another_error_is_not_retried(shutdowns: list[int]) -> None:
    starts: list[int] = []

    def start() -> None:
        starts.append(1)
        raise ValueError("num_cpus must be positive")

    with pytest.raises(ValueError, match="num_cpus"):
        start_embedded(start)
    assert (len(starts), len(shutdowns)) == (1, 0)
