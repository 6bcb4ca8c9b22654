"""Where the op sweep's time goes, per sample, on one device: one process, no isolation, no Ray.

Runs the op sweep's inner loop (`runners.op_sweep.run.sweep_units`) over a fixed set of OpInfos
under cProfile and prints seconds per sample result, then the share of the time spent in each
part of a sample's life:
  generate      PyTorch's sample generators (`OpInfo.sample_inputs`)
  cpu reference the sample on the CPU (forward and backward)
  device run    the sample on the device, inside `Device.record_fallbacks`
    of which record_fallbacks set-up and tear-down (entering / leaving the context)
  compare       torch.testing.assert_close and the max-error computation
  move          copying samples to the device and results back

    .venv/bin/python bench/op_sweep_profile.py [--device neuron] [--dtypes fp32]
        [--ops add,mul,... | --ops all]  (default: 24 common OpInfos; all: the whole op_db)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT_OPS = (
    "add,mul,sub,div,sum,mean,amax,softmax,log_softmax,nn.functional.layer_norm,"
    "nn.functional.gelu,nn.functional.silu,matmul,mm,bmm,nn.functional.linear,"
    "nn.functional.conv2d,nn.functional.embedding,index_select,gather,cat,transpose,sort,"
    "nn.functional.scaled_dot_product_attention"
)


def _cumulative(stats: pstats.Stats, match: str, name: str) -> float:
    total = 0.0
    for (filename, _, func), (_, _, _, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        if match in filename and func == name:
            total += ct
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--dtypes", default="fp32")
    parser.add_argument("--ops", default=DEFAULT_OPS)
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import torch

    torch.set_num_threads(1)
    from runners.op_sweep import opdb
    from runners.op_sweep.run import sweep_units
    from runners.op_sweep.units import Unit
    from runners.settings import DTYPE_NAMES, OpSettings, dtype_names

    names = None if args.ops == "all" else [n for n in args.ops.split(",") if n]
    keys = opdb.select_opinfos(names)
    dtypes = dtype_names(args.dtypes) if args.dtypes else DTYPE_NAMES
    units = [
        Unit(k, opdb.get_opinfo(k).name, opdb.get_opinfo(k).variant_test_name or None, dtypes)
        for k in keys
    ]
    settings = OpSettings(device=args.device, dtypes=dtypes)
    device = settings.device.build()
    device.setup()
    rows: list[dict] = []

    def send(message: tuple) -> None:
        if message[0] == "row":
            rows.append(message[1])

    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    sweep_units(units, (0, 0, 0), device, settings, send=send)
    profiler.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    samples = [r for r in rows if r.get("sample_index") is not None]
    ran = [r for r in samples if r["status"] != "skip"]
    print(
        f"{args.device} ({'emulated' if device.emulated else 'real'}), {len(keys)} OpInfos x "
        f"{len(dtypes)} dtypes: {len(rows)} results, {len(samples)} sample results "
        f"({len(ran)} run on the device) in {wall:.2f} s under cProfile"
    )
    print(f"seconds per sample result: {wall / max(1, len(samples)):.4f}")
    check = "runners/op_sweep/check.py"
    parts = {
        "generate": _cumulative(stats, "opinfo/core.py", "sample_inputs")
        + _cumulative(stats, "opinfo/core.py", "reference_inputs"),
        "record_fallbacks set-up": _cumulative(stats, "contextlib.py", "__enter__")
        + _cumulative(stats, "contextlib.py", "__exit__"),
        "compare": _cumulative(stats, check, "compare"),
        "move": _cumulative(stats, check, "moved") + _cumulative(stats, check, "_to_cpu"),
        "dispatched ops (device and CPU)": _cumulative(stats, check, "__torch_dispatch__"),
        "check_sample (all of a sample but generation)": _cumulative(stats, check, "check_sample"),
    }
    parts["outside check_sample (lazy sample generators, the loop)"] = (
        wall - parts["check_sample (all of a sample but generation)"]
    )
    for name, seconds in parts.items():
        print(f"  {name:56s} {seconds:7.2f} s  {100 * seconds / wall:5.1f}%")


if __name__ == "__main__":
    main()
