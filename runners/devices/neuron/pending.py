"""The pending-error store: errors a backward raised where they could not propagate.

An exception raised by a Python dispatch mode (FakeTensorMode while torch.compile traces a
backward) leaves the Python error indicator set while C++ unwinds; the autograd engine's stream
guard then calls `type_` from a noexcept destructor, Python reports the pending error, and the
process aborts ("terminate called without an active exception", SIGABRT). The device guard
(`hooks.DeviceGuard`) keeps such an error here instead; `take_pending_error()` gives it back to
the caller of the backward (the neuron compile backend re-raises it). A leaf: the guard and the
compiler both import it, neither imports the other.
"""

from __future__ import annotations

_PENDING_ERRORS: list[BaseException] = []


def keep_pending_error(error: BaseException) -> None:
    _PENDING_ERRORS.append(error)


def take_pending_error() -> BaseException | None:
    """The error a backward raised inside a stream guard's destructor, if any (then cleared)."""
    error = _PENDING_ERRORS[-1] if _PENDING_ERRORS else None
    _PENDING_ERRORS.clear()
    return error
