"""The torch the profile was written for against the torch it runs on, as data (no torch).

The snapshot's `pyproject.toml` asks for `torch~=2.10`; the project runs torch 2.14. What differs
between the two, for what the profile touches, is `torch-skew.json` (beside the profile's data;
written by scripts/extract_torch_skew.py from both torches' own files, each with where it was
read): the ATen overloads, ProcessGroup methods, `_c10d_functional` ops and autocast lists one
has and the other has not, and the ProcessGroup methods the newer torch declares equivalent to
older ones.

What the emulator makes of it:
- a name the running torch declares equivalent to one the snapshot implements (a deprecated
  forwarder: `all_gather_single` for `_allgather_base`) runs the snapshot's implementation under
  the new name, with evidence `renamed_since_profile`, and keeps every limit the snapshot puts
  on the old name;
- a name the profile's torch did not have, with no declared equivalent, is
  `newer_than_profile`: the profile cannot say what the device does with it, so the verdict is
  unverified (a band's upper bound), never a fact about the device.
The data describes the pairing it was made for (`new.version`). On another torch the
ProcessGroup equivalences still hold where that torch has the newer method (they are torch's own
declarations; a group answers only the methods its torch calls), but the ATen inventory is not
applied (`applies()`): rerun the script against that torch.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from runners.devices.base import torch_version

# beside the snapshot's profile data (profiles.py imports evidence.py, which reads this module)
DATA_FILE = (
    Path(__file__).resolve().parent
    / "data"
    / "profiles"
    / "torchneuron-2026-04-21"
    / "torch-skew.json"
)


@functools.cache
def facts() -> dict[str, Any]:
    """The whole data file."""
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


def profile_torch() -> str:
    """The torch the snapshot was written for (`2.10`, from its pyproject)."""
    return str(facts()["profile_torch"]["version"])


def data_torch() -> str:
    """The torch release the inventory compares the profile's against (`2.14.1`)."""
    return str(facts()["new"]["version"]).split("+", 1)[0]


def applies() -> bool:
    """Whether the inventory describes the torch installed here."""
    return torch_version() == data_torch()


@functools.cache
def _newer_aten() -> frozenset[str]:
    return frozenset(facts()["aten"]["added"])


def newer_op(op: str) -> bool:
    """Whether the ATen op `op` (`aten::name.overload`, `.default` or not) is one the profile's
    torch did not register."""
    if not applies():
        return False
    name = op.removesuffix(".default")
    return name in _newer_aten()


def renamed_collectives() -> dict[str, dict[str, str]]:
    """ProcessGroup method (newer name) -> {stands_for, declared_by}, as torch declares it."""
    found = facts()["process_group"]["equivalent"]
    return {name: entry for name, entry in found.items() if entry}


def newer_methods() -> frozenset[str]:
    """The ProcessGroup methods the inventory's newer torch has and the profile's had not."""
    return frozenset(facts()["process_group"]["added"])


def summary() -> str:
    """One line for messages and docs: the pairing and where the profile's torch comes from."""
    found = facts()["profile_torch"]
    return (
        f"profile for torch {found['version']} ({found['requirement']}, "
        f"{found['where']} at {found['source']['commit'][:7]}), run on torch {torch_version()}"
    )
