"""What TorchNeuron's process group does with each c10d collective, as data (no torch).

Read from `distributed.json` (runners/devices/neuron/data/profiles/torchneuron-2026-04-21/, written by
scripts/extract_torchneuron_distributed.py from the snapshot; its `source` names the commit):
which collectives `ProcessGroupNeuron` implements, which raise NotImplementedError always or for
some arguments, which it does not define, the reductions and all-to-all group sizes its kernels
accept, its functional-collective and DTensor registrations, and its own tests of each.

The emulated process group (`process_group.py`) follows it; a verdict about a collective says
what it rests on in the compile evidence vocabulary (`ground.schema.CompileEvidence`):
`registered` (ProcessGroupNeuron defines it; a DTensor rule it registers), `tested` (its own
tests call it), `raises` (its code raises on it, or it defines no method: c10d's base cannot run
it on the device), `none` (the data says nothing).

The snapshot was written for torch 2.10 and the data names the methods of that torch; the
running torch's ProcessGroup has newer ones (`skew.py`). A newer method that torch declares
equivalent to one the snapshot implements is `renamed` (evidence `renamed_since_profile`: the
snapshot's implementation under the new name, with its limits); one with no declared equivalent
is `newer` (evidence `newer_than_profile`: unverified, never "it raises").
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from ground.schema import CompileEvidence
from runners.devices.neuron import skew
from runners.devices.neuron.profiles import PROFILE_DIR, SNAPSHOT

DATA_FILE = PROFILE_DIR / SNAPSHOT / "distributed.json"
OP_PREFIX = "c10d::"  # how a collective is named in rows (`c10d::allreduce`)
IMPLEMENTED, RAISES, LIMITED, ABSENT = "implemented", "raises", "limited", "absent"
RENAMED, NEWER = "renamed", "newer"  # since the profile's torch (see the module's docstring)
# What c10d's base ProcessGroup (torch 2.14) does with a method a Python group lacks: these
# forward to an older method with the same arguments, which is torch declaring the two
# equivalent (tests/test_distributed_group.py measures it on the installed torch); every other
# raises "No backend type associated with device type ...".
BASE_FORWARDS = {
    "all_gather_single_coalesced": "allgather_into_tensor_coalesced",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced",
    "all_to_all_single": "alltoall_base",
}


@dataclass(frozen=True)
class Collective:
    """One c10d collective as ProcessGroupNeuron treats it."""

    name: str  # the ProcessGroup method (`allreduce`, `_allgather_base`)
    status: str  # implemented | raises | limited | absent | renamed | newer
    where: str  # the snapshot's line; for renamed and newer, what torch says of the name
    messages: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    stands_for: str | None = None  # renamed: the snapshot's method it is run as

    @property
    def runs(self) -> bool:
        """It runs on the device (for some arguments, where it is limited; a newer method is
        taken to run, unverified)."""
        return self.status in (IMPLEMENTED, LIMITED, RENAMED, NEWER)

    @property
    def evidence(self) -> str:
        if self.status == RENAMED:
            return CompileEvidence.RENAMED_SINCE_PROFILE.value
        if self.status == NEWER:
            return CompileEvidence.NEWER_THAN_PROFILE.value
        if not self.runs:
            return CompileEvidence.RAISES.value
        return CompileEvidence.REGISTERED.value


@functools.cache
def facts() -> dict[str, Any]:
    """The whole data file."""
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


@functools.cache
def collectives() -> dict[str, Collective]:
    """Every c10d collective, by ProcessGroup method name: the snapshot's, and the running
    torch's newer names as `skew.py` says (renamed where torch declares an equivalent)."""
    found = {
        name: Collective(
            name=name,
            status=entry["status"],
            where=entry["where"],
            messages=tuple(entry.get("messages", ())),
            tests=tuple(entry.get("tests", ())),
        )
        for name, entry in facts()["collectives"].items()
    }
    renamed = skew.renamed_collectives()
    newer = skew.newer_methods()
    for name, entry in found.items():
        if entry.status != ABSENT or name not in newer:
            continue  # the snapshot's own word about a name its torch had
        if name in renamed:
            stands_for, declared = renamed[name]["stands_for"], renamed[name]["declared_by"]
        elif name in BASE_FORWARDS:
            stands_for = BASE_FORWARDS[name]
            declared = (
                f"c10d's ProcessGroup base class forwards {name} to {stands_for} "
                f"(torch {skew.data_torch()})"
            )
        else:
            found[name] = Collective(
                name=name,
                status=NEWER,
                where=(
                    f"ProcessGroup.{name} is new since torch {skew.profile_torch()} (the "
                    f"profile's torch), and torch declares no older equivalent"
                ),
            )
            continue
        found[name] = Collective(
            name=name,
            status=RENAMED,
            where=f"{declared}; the snapshot's {stands_for}: {found[stands_for].where}",
            tests=found[stands_for].tests,
            stands_for=stands_for,
        )
    return found


def collective(name: str) -> Collective | None:
    """`name` with or without the `c10d::` prefix."""
    return collectives().get(name.removeprefix(OP_PREFIX))


def reduce_ops() -> frozenset[str]:
    """The reductions (ReduceOp names) its collective kernels accept."""
    return frozenset(facts()["reduce_ops"]["supported"])


def all_to_all_accepts(group_size: int) -> bool:
    """Whether its all-to-all kernel takes a group of `group_size` ranks."""
    sizes = facts()["all_to_all_world_sizes"]
    return group_size in sizes["sizes"] or group_size % int(sizes["multiple_of"]) == 0


def sharding_ops() -> tuple[str, ...]:
    """The ATen ops it registers DTensor sharding strategies for."""
    return tuple(entry["op"] for entry in facts()["sharding"])


def functional_collectives() -> tuple[str, ...]:
    """The `_c10d_functional` ops it registers for the device (`ns::name`)."""
    return tuple(entry["op"] for entry in facts()["functional_collectives"])


def evidence(op: str) -> str | None:
    """The evidence a verdict about `op` rests on: a collective (`c10d::x`) or a DTensor op with
    a sharding rule of its own (`aten::x`); None where the data says nothing of it."""
    found = collective(op) if op.startswith(OP_PREFIX) or "::" not in op else None
    if found is not None:
        return found.evidence
    if op in sharding_ops():
        return CompileEvidence.REGISTERED.value
    return None
