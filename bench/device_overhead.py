"""What the emulated neuron device and the fallback recorder cost, side by side, in one run.

For tiny Llama / GPT-2 / BERT (hidden 32, 2 layers), one training step (forward + loss +
backward) timed as the median of `--steps` after a warm-up, on:
  cpu                 plain CPU, no recorder
  cpu+recorder        CPU inside `CpuDevice.record_fallbacks()`
  neuron              emulated neuron, default profile (TorchNeuron's registrations), recording
  neuron-all-fallback emulated neuron, empty profile: every op goes through the logged fallback
and a sweep-like pass per model (build from config, save_pretrained / from_pretrained, move to
the device, forward, backward, CPU reference comparison) on cpu and on neuron. Ratios are
against plain CPU.

    .venv/bin/python bench/device_overhead.py [--steps 20] [--models llama,gpt2,bert]
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny(kind: str):
    """The same tiny Llama / GPT-2 / BERT the neuron tests use."""
    from transformers.utils import logging

    from tests.neuron_support import tiny_model

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    return tiny_model(kind)


def interleaved_ms(fns: dict[str, Callable[[], object]], steps: int) -> dict[str, float]:
    """Median ms per variant, the variants run in turn (shuffled) so machine load hits them
    alike."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    shuffle = random.Random(0).shuffle
    for _ in range(steps):
        shuffle(order)  # no variant always runs first (warm caches favour the later ones)
        for name, fn in order:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", default="llama,gpt2,bert")
    args = parser.parse_args()

    import torch

    from runners.devices.cpu import CpuDevice
    from runners.devices.neuron.emulated import NeuronEmulatedDevice
    from runners.devices.neuron.profiles import DeviceProfile
    from runners.numerics import compare_gradients, compare_tensors

    torch.set_num_threads(1)
    cpu = CpuDevice()
    neuron = NeuronEmulatedDevice()
    neuron.setup()
    all_fallback = NeuronEmulatedDevice(profile=DeviceProfile.from_ops("empty", []))

    def step_fn(model, ids, recorder):
        def step():
            model.zero_grad(set_to_none=True)
            if recorder is None:
                model(input_ids=ids, labels=ids).loss.backward()
            else:
                with recorder.record_fallbacks():
                    model(input_ids=ids, labels=ids).loss.backward()

        return step

    def sweep_like(kind, device):
        def run():
            torch.manual_seed(0)
            built = tiny(kind)
            with tempfile.TemporaryDirectory() as tmp:
                built.save_pretrained(tmp)
                loaded = type(built).from_pretrained(tmp).eval()
            ids = torch.randint(0, 128, (2, 8))
            reference = copy.deepcopy(loaded) if device is not None else None
            model = device.prepare_model(loaded) if device is not None else loaded
            dev_ids = device.to_device(ids) if device is not None else ids
            with device.record_fallbacks() if device is not None else cpu.record_fallbacks():
                out = model(input_ids=dev_ids, labels=dev_ids)
                out.loss.backward()
            if reference is not None:
                expected = reference(input_ids=ids, labels=ids)
                expected.loss.backward()
                compare_tensors(expected, out, torch.float32)
                compare_gradients(reference, model, torch.float32)

        return run

    print(f"torch {torch.__version__}, 1 thread, median of {args.steps} interleaved steps (ms)")
    header = (
        f"{'model':7} {'cpu':>8} {'cpu+rec':>8} {'neuron':>8} {'all-fb':>8} "
        f"{'rec/cpu':>8} {'neu/cpu':>8} {'allfb/cpu':>9} {'fb ops':>6} {'fb calls':>8}"
    )
    print(header)
    sweep_rows = []
    for kind in args.models.split(","):
        torch.manual_seed(0)
        reference = tiny(kind)
        ids = torch.randint(0, 128, (2, 8))
        on_neuron = neuron.prepare_model(copy.deepcopy(reference))
        nids = ids.to("neuron")
        t = interleaved_ms(
            {
                "cpu": step_fn(reference, ids, None),
                "rec": step_fn(reference, ids, cpu),
                "neu": step_fn(on_neuron, nids, neuron),
                "all": step_fn(on_neuron, nids, all_fallback),
            },
            args.steps,
        )
        t_cpu, t_rec, t_neu, t_all = t["cpu"], t["rec"], t["neu"], t["all"]
        with neuron.record_fallbacks() as log:
            step_fn(on_neuron, nids, None)()
        neuron.activate()
        print(
            f"{kind:7} {t_cpu:8.2f} {t_rec:8.2f} {t_neu:8.2f} {t_all:8.2f} "
            f"{t_rec / t_cpu:8.2f} {t_neu / t_cpu:8.2f} {t_all / t_cpu:9.2f} "
            f"{log.op_count:6d} {log.call_count:8d}"
        )
        sweep_rows.append((kind, sweep_like(kind, None), sweep_like(kind, neuron)))

    print("\nsweep-like pass per model (build, save/load, move, fwd+bwd, CPU comparison), ms")
    print(f"{'model':7} {'cpu':>8} {'neuron':>8} {'neu/cpu':>8}")
    total_cpu = total_neu = 0.0
    for kind, on_cpu, on_neu in sweep_rows:
        t = interleaved_ms({"cpu": on_cpu, "neu": on_neu}, max(3, args.steps // 4))
        c, n = t["cpu"], t["neu"]
        total_cpu += c
        total_neu += n
        print(f"{kind:7} {c:8.1f} {n:8.1f} {n / c:8.2f}")
    print(f"{'total':7} {total_cpu:8.1f} {total_neu:8.1f} {total_neu / total_cpu:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
