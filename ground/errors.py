"""Exceptions with structured fields, shared by every package.

They pickle cleanly (they may cross Ray) and carry what a user needs to act: the model, the
stage, the device, and a hint for the next step. Errors are caught only at boundaries (the CLI,
the runner), and formatted once by `format_error`.
"""

from __future__ import annotations

import errno
from typing import Any, ClassVar


class SweepError(Exception):
    """Base class. `hint` is the next step for the user. `environment`: the machine, not the
    model, failed (see `is_environment_error`); such errors never become a model's row."""

    environment: ClassVar[bool] = False
    exit_code: ClassVar[int] = 2

    def __init__(
        self,
        message: str,
        *,
        model_id: str | None = None,
        stage: str | None = None,
        device: str | None = None,
        hint: str | None = None,
        **fields: Any,
    ):
        super().__init__(message)
        self.message = message
        self.model_id = model_id
        self.stage = stage
        self.device = device
        self.hint = hint
        self.fields = fields

    def __reduce__(self):  # keep keyword fields when pickled across processes
        return (
            _rebuild,
            (
                type(self),
                self.message,
                {
                    "model_id": self.model_id,
                    "stage": self.stage,
                    "device": self.device,
                    "hint": self.hint,
                    **self.fields,
                },
            ),
        )


def _rebuild(cls: type[SweepError], message: str, kwargs: dict[str, Any]) -> SweepError:
    return cls(message, **kwargs)


class UsageError(SweepError):
    """Bad command-line input: exit code 2."""


class StoreError(SweepError):
    """The store cannot be read or written as asked."""


class ConfigError(SweepError):
    """A model's config cannot be resolved or used. `reason` is a SkipReason value."""

    def __init__(self, message: str, *, reason: str, **kwargs: Any):
        super().__init__(message, reason=reason, **kwargs)
        self.reason = reason


class ShrinkError(SweepError):
    """The shrinker could not produce a valid tiny config (a failure of the load stage)."""


class UnknownNameError(UsageError):
    """An unknown name in a registry, with the closest known ones."""


class HubError(SweepError):
    """The Hub cannot be reached, or keeps failing after retries (timeouts, 429, 5xx, malformed
    answers): an environment problem, never a model's result. Stops the command with one error."""

    environment = True


class DeviceError(SweepError):
    """The device cannot be set up (not installed, not available on this machine). Subclasses
    that are a model's own result (strict mode's refused fallback) set `environment = False`.
    Exit code 3, as the README defines it: the device failed before any model ran (the same
    command works where the device is there; an unknown device name is a UsageError, 2)."""

    environment = True
    exit_code = 3


class EnvironmentFault(SweepError):
    """A model task could not run because of its environment, not the model: the device failed
    to set up in the child, a core package is missing, the child was killed from outside (not
    for memory), Ray lost the worker, node or object. Retried; never a row."""

    environment = True


class SystemFaultError(SweepError):
    """The environment kept failing after retries: the models it hit have no rows (a rerun with
    the same run id retries them). Exit code 3."""

    environment = True
    exit_code = 3


# Packages without which nothing runs: their absence is the machine's problem, not a model's
# (a model needing an optional package, such as timm, is a `missing_package` skip instead).
CORE_PACKAGES = frozenset(
    {"torch", "transformers", "diffusers", "huggingface_hub", "safetensors", "numpy", "pyarrow"}
)
# OS errors that say the machine is short of something (disk, files, a writable store).
_ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EMFILE, errno.ENFILE, errno.EIO}
)


def is_environment_error(exc: BaseException) -> bool:
    """True when `exc` is the environment failing (retry the task; never record it as the
    model's result), False when it may be the model's own failure."""
    if isinstance(exc, SweepError):
        return exc.environment
    if isinstance(exc, ModuleNotFoundError):
        return (exc.name or "") in CORE_PACKAGES
    if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, PermissionError)):
        return exc.errno in _ENVIRONMENT_ERRNOS
    return False


def safe_text(exc: BaseException) -> str:
    """`str(exc)` that never raises (a hostile exception's `__str__` may)."""
    try:
        return str(exc)
    except Exception:
        try:
            return repr(exc)
        except Exception:
            return f"<{type(exc).__name__} whose message cannot be read>"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name where it has none."""
    text = safe_text(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def format_error(exc: BaseException) -> str:
    """One line (plus an optional hint line) for a user, no traceback."""
    if isinstance(exc, SweepError):
        where = [  # what the message does not name already
            f"{k}={v}"
            for k, v in (("model", exc.model_id), ("stage", exc.stage), ("device", exc.device))
            if v and str(v) not in exc.message
        ]
        text = f"error: {exc.message}" + (f" ({', '.join(where)})" if where else "")
        if exc.hint:
            text += f"\nhint: {exc.hint}"
        return text
    return f"error: {type(exc).__name__}: {exc}"
