"""Exceptions with structured fields, shared by every package.

They pickle cleanly (they may cross Ray) and carry what a user needs to act: the model, the
stage, the device, and a hint for the next step. Errors are caught only at boundaries (the CLI,
the runner), and formatted once by `format_error`.
"""

from __future__ import annotations

from typing import Any


class SweepError(Exception):
    """Base class. `hint` is the next step for the user."""

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


class DeviceError(SweepError):
    """The device cannot be set up (not installed, not available on this machine)."""


def format_error(exc: BaseException) -> str:
    """One line (plus an optional hint line) for a user, no traceback."""
    if isinstance(exc, SweepError):
        where = [
            f"{k}={v}"
            for k, v in (("model", exc.model_id), ("stage", exc.stage), ("device", exc.device))
            if v
        ]
        text = f"error: {exc.message}" + (f" ({', '.join(where)})" if where else "")
        if exc.hint:
            text += f"\nhint: {exc.hint}"
        return text
    return f"error: {type(exc).__name__}: {exc}"
