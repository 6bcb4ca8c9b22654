"""The options a device declares: each a keyword of its constructor, given on the command line.

A device class lists its own (`Device.options`); the registry merges every registered device's
(`runners.devices.device_options`), `hfsweep`'s option groups are built from them, and
`DeviceChoice` (`runners/settings.py`) carries the values a run gave to the device's `create`.
No other module names a device's options.
"""

from __future__ import annotations

from dataclasses import dataclass

# Where an option is offered: `device`, with `--device` (run, check, ops); `model`, with a
# model's stages (run, check: what the compile stage does, say).
GROUPS = ("device", "model")


@dataclass(frozen=True)
class DeviceOption:
    """One option of a device: `flag` on the command line, `keyword` of its constructor (and
    the argparse destination), `help` as `hfsweep --help` prints it (it starts with the
    device's name: other devices ignore it), `choices` where only some values are valid."""

    flag: str
    keyword: str
    help: str
    choices: tuple[str, ...] | None = None
    group: str = "device"

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"{self.flag}: group must be one of {GROUPS}, not {self.group!r}")
        if not self.flag.startswith("--"):
            raise ValueError(f"{self.flag!r}: a device option's flag starts with --")
