"""Extract TorchNeuron's autocast policy (which ops autocast casts, and how) into a data file.

TorchNeuron registers its AutocastPrivateUse1 kernels in `torch_neuronx/csrc/amp/autocast_mode.cpp`
by handing PyTorch's own op-list macros (`AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`, ...,
defined in ATen's `autocast_mode.h`) to its registration macros, each with a cast policy, plus
one kernel of its own (`binary_cross_entropy`, banned). So the list is the two files together:
this script reads the policy per macro (and the extra registration) from TorchNeuron's file and
the ops per macro from the ATen header, and writes one `op<TAB>policy` line per registration,
with both sources' line numbers.

    git --git-dir=<mirror of parmoham-aws/test-repo-parmoham> show \\
        98154b867aa24562a3213e520d9ad7fd41032291:torch_neuronx/csrc/amp/autocast_mode.cpp \\
        > autocast_mode.cpp
    python scripts/extract_autocast_policy.py --torchneuron autocast_mode.cpp \\
        --commit 98154b867aa24562a3213e520d9ad7fd41032291 \\
        --out runners/devices/neuron/data/profiles/torchneuron-2026-04-21/autocast-policy.txt

`--aten-header` defaults to the installed torch's `include/ATen/autocast_mode.h` (the op lists
TorchNeuron's kernels are compiled from are those of the torch it is built against).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TORCHNEURON_REPO = "github.com/parmoham-aws/test-repo-parmoham"
TORCHNEURON_PATH = "torch_neuronx/csrc/amp/autocast_mode.cpp"
ATEN_PATH = "aten/src/ATen/autocast_mode.h"
POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote")


@dataclass(frozen=True)
class Registration:
    op: str  # aten::name or aten::name.overload
    policy: str  # a CastPolicy, or "banned" (TorchNeuron's kernel that always raises)
    torchneuron_line: int
    aten_line: int | None  # where the op list names it (None: TorchNeuron's own m.impl)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def macro_policies(source: str) -> dict[str, tuple[str | None, int]]:
    """TorchNeuron's file: op-list macro -> (policy, line of its use). A list whose entries
    carry their own policy (`AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`) maps to None."""
    wrappers = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"#define\s+(\w+)\(\.\.\.\)\s+KERNEL_PRIVATEUSEONE\(__VA_ARGS__,\s*(\w+)\)", source
        )
    }
    out: dict[str, tuple[str | None, int]] = {}
    for m in re.finditer(r"^\s*(AT_FORALL_\w+)\((\w+)\)", source, re.MULTILINE):
        macro, wrapper = m.group(1), m.group(2)
        line = _line_of(source, m.start(1))
        if wrapper in wrappers:
            out[macro] = (wrappers[wrapper], line)
        elif wrapper == "KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE":
            out[macro] = (None, line)
        else:
            raise ValueError(f"{macro} is registered through {wrapper}, which is not understood")
    return out


def extra_registrations(source: str) -> list[tuple[str, str, int]]:
    """TorchNeuron's own `m.impl` kernels in the AutocastPrivateUse1 block: (op, policy, line)."""
    found = []
    for m in re.finditer(
        r'm\.impl\(\s*TORCH_SELECTIVE_NAME\("(aten::[\w.]+)"\)\s*,\s*TORCH_FN\(\(?&?([\w:]+)',
        source,
    ):
        kernel = m.group(2).rsplit("::", 1)[-1]
        policy = "banned" if kernel.endswith("_banned") else kernel
        found.append((m.group(1), policy, _line_of(source, m.start(1))))
    return found


def _entries(body: str) -> list[tuple[str, int]]:
    """The `_(...)` entries of a macro body, each with its offset (parentheses balanced)."""
    out = []
    i = 0
    while (i := body.find("_(", i)) != -1:
        if i and (body[i - 1].isalnum() or body[i - 1] == "_"):
            i += 2
            continue
        depth, j = 0, i + 1
        while j < len(body):
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            if depth == 0:
                break
            j += 1
        out.append((body[i + 2 : j], i))
        i = j + 1
    return out


def op_lists(header: str) -> dict[str, list[tuple[str, str | None, int]]]:
    """ATen's header: op-list macro -> [(op, the entry's own policy or None, line)]."""
    lists: dict[str, list[tuple[str, str | None, int]]] = {}
    for m in re.finditer(r"#define\s+(AT_FORALL_\w+)\(_\)((?:[^\n]*\\\n)*[^\n]*)", header):
        entries: list[tuple[str, str | None, int]] = []
        for text, offset in _entries(m.group(2)):
            line = _line_of(header, m.start(2) + offset)
            flat = " ".join(text.replace("\\\n", " ").split())
            named = re.search(r'"([\w.]+)"', flat)
            if named:  # _(ADD_NS(norm), "norm.Scalar", <signatures>, policy)
                policy = flat.rsplit(",", 1)[-1].strip()
                entries.append((f"aten::{named.group(1)}", policy, line))
            else:  # _(op) or _(op, overload)
                parts = [p.strip() for p in flat.split(",")]
                entries.append((f"aten::{'.'.join(parts)}", None, line))
        lists[m.group(1)] = entries
    return lists


def registrations(torchneuron: str, header: str) -> list[Registration]:
    """Every AutocastPrivateUse1 registration of TorchNeuron's file, in its order."""
    lists = op_lists(header)
    out: list[Registration] = []
    for macro, (policy, line) in macro_policies(torchneuron).items():
        if macro not in lists:
            raise ValueError(f"{macro} is not defined in the ATen header")
        for op, own, aten_line in lists[macro]:
            chosen = policy or own
            if chosen not in POLICIES:
                raise ValueError(f"{op}: unknown policy {chosen!r}")
            out.append(Registration(op, chosen, line, aten_line))
    for op, policy, line in extra_registrations(torchneuron):
        out.append(Registration(op, policy, line, None))
    return out


def render(regs: list[Registration], *, commit: str, torch_version: str) -> str:
    lines = [
        "# TorchNeuron's autocast policy (AutocastPrivateUse1): one registration per line,",
        "# `op<TAB>policy<TAB>where`. Written by scripts/extract_autocast_policy.py; do not edit.",
        f"# Policies per op list: {TORCHNEURON_REPO} @ {commit}, {TORCHNEURON_PATH}.",
        f"# Ops per list: PyTorch {torch_version}, {ATEN_PATH} (the lists TorchNeuron's kernels",
        "# are compiled from). Policies: lower_precision_fp (cast floating inputs on the device to",
        "# the autocast dtype), fp32 (to float32), fp32_set_opt_dtype (dtype=float32 unless given),",
        "# fp32_append_dtype (the overload with a dtype, float32), promote (the widest floating",
        "# input type), banned (raises under autocast).",
    ]
    for r in regs:
        where = f"torchneuron:{r.torchneuron_line}" + (
            f" aten:{r.aten_line}" if r.aten_line is not None else ""
        )
        lines.append(f"{r.op}\t{r.policy}\t{where}")
    return "\n".join(lines) + "\n"


def installed_header() -> tuple[Path, str]:
    import torch

    return Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h", torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchneuron", type=Path, required=True, help=TORCHNEURON_PATH)
    parser.add_argument("--commit", required=True, help="the snapshot commit the file is from")
    parser.add_argument("--aten-header", type=Path, help="default: the installed torch's")
    parser.add_argument("--torch-version", help="default: the installed torch's")
    parser.add_argument("--out", type=Path, help="default: stdout")
    args = parser.parse_args(argv)
    header_path, version = installed_header()
    header = (args.aten_header or header_path).read_text(encoding="utf-8")
    regs = registrations(args.torchneuron.read_text(encoding="utf-8"), header)
    text = render(regs, commit=args.commit, torch_version=args.torch_version or version)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
