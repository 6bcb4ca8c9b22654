"""A parent warmed once before it forks: both sweeps' children (`runners.isolation`,
`runners.op_sweep.isolation`) are forked from a parent that has already imported what each child
would otherwise import again, so a child starts in milliseconds.

Imports only: the device itself is set up in each child (`runners.supervisor.device_ready`),
since registering a PrivateUse1 backend in the parent breaks autograd in forked children, and a
real accelerator's runtime does not survive a fork. Where children are spawned (off Linux) there
is nothing to warm. `HFSWEEP_WARM_PARENT=0` leaves every child to import for itself, beyond the
body's own modules (benches compare the two).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import TYPE_CHECKING

from runners.supervisor import forks

if TYPE_CHECKING:
    from model_configs.spec import TinySpec

# what this process has warmed itself with: modules, "backends", "compile",
# "model:<library>:<class>"
_WARMED: set[str] = set()


def warm_parent(*modules: str, compiles: bool = True, device: str | None = None) -> None:
    """Import once in this (parent) process what each forked child would otherwise import
    again: `modules`, what the child's body imports (a model's: `runners.stages.engine`, torch and the
    model libraries; the op sweep's: its runner and PyTorch's OpInfo database); the device's
    own modules (`Device.preload_modules`: its compiler; every registered device's when
    `device` is None) and, where they are needed, Dynamo's backends (a device with a compiler
    of its own registers its backend at set-up, which looks them all up, importing every one,
    about 1.3 s with Dynamo itself); and, where the children compile (`compiles`), the rest of
    the compile stack, which a first compile imports (about 0.7 s more) and builds
    (decompositions, 0.3 s). A parent whose children never compile, on a device without a
    compiler of its own (the CPU), warms neither."""
    if not forks():
        return
    if os.environ.get("HFSWEEP_WARM_PARENT", "1") == "0":
        for name in modules:  # what the parent always imported before
            importlib.import_module(name)
        return
    from runners.devices import preload_modules

    compilers = preload_modules(device)
    backends = compiles or bool(compilers)
    wanted = {
        *modules,
        *compilers,
        *(("backends",) if backends else ()),
        *(("compile",) if compiles else ()),
    }
    if _WARMED.issuperset(wanted):
        return
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile worker pool
    for name in [*modules, *compilers]:  # compilers: what the device's processes import
        importlib.import_module(name)
    if backends and "backends" not in _WARMED:
        from torch._dynamo.backends.registry import list_backends

        list_backends(exclude_tags=())
    if compiles and "compile" not in _WARMED:
        _warm_compile_stack()
    _WARMED.update(wanted)


def warm_model(spec: TinySpec) -> None:
    """Import once in this parent what building `spec` imports (its library's model class,
    `model_configs.build.import_for_build`), where its adapter allows it
    (`Adapter.warm_in_parent`): otherwise every forked child imports it again (the first
    transformers model class brings its modeling stack, seconds per child)."""
    key = f"model:{spec.library}:{spec.architecture}"
    if not forks() or os.environ.get("HFSWEEP_WARM_PARENT") == "0" or key in _WARMED:
        return
    _WARMED.add(key)
    from model_configs.build import import_for_build
    from model_configs.libraries import get_adapter

    with contextlib.suppress(Exception):  # an unknown library fails in the child, as a row
        if get_adapter(spec.library).warm_in_parent:
            import_for_build(spec)


def warm_peft() -> None:
    """Import peft once in this parent when the lora stage runs: each forked child would
    otherwise import it again (several seconds: it brings accelerate)."""
    if not forks() or os.environ.get("HFSWEEP_WARM_PARENT") == "0":
        return
    with contextlib.suppress(ImportError):  # without peft the lora stage is a skip
        importlib.import_module("peft")


def _warm_compile_stack() -> None:
    for name in _COMPILE_IMPORTS:  # what a first compile imports (measured: about 0.7 s)
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    import torch._decomp

    # the decomposition table compile backends (and export) build on first use, from the
    # dispatcher's registrations (cached per process; about 0.3 s): Python objects, no op
    torch._decomp.core_aten_decompositions()


# Modules the compile stage imports on its first use in a process (torch 2.14), found by
# comparing sys.modules before and after compiling models in a fresh child.
_COMPILE_IMPORTS = (
    # what a first compile (aot_eager or the neuron backend: AOTAutograd) imports with torch
    # 2.14 (measured: 1.2 s of a fresh child's first compile, 0.3 s once these are imported)
    "torch._inductor.compile_fx",
    "torch._inductor.lowering",
    "torch._inductor.select_algorithm",
    "torch.ao.quantization",
    "torch._dynamo.dce_extra_outputs",
    "torch._export.passes._node_metadata_hook",
    "torch._inductor.compiler_bisector",
    "torch.distributed.tensor.experimental",
    "sympy.combinatorics",
    "sympy.tensor.tensor",
    "torch._dynamo.repro.after_aot",
    "torch._export.db",
    "torch._export.passes.add_runtime_assertions_for_constraints_pass",
    "torch._export.passes.collect_tracepoints_pass",
    "torch._functorch._activation_checkpointing.remat_using_tags_for_fwd_loss_bwd_graph_pass",
    "torch._higher_order_ops.passes.inline_invoke_subgraph",
    "torch._inductor.debug",
    "torch._inductor.fx_passes.dedupe_symint_uses",
    "torch._subclasses.schema_check_mode",
    "torch.export._trace",
    "torch.export._unlift",
    "torch.fx.experimental.validator",
    "torch.fx.passes.infra.partitioner",
    "torch.fx.passes.utils.fuser_utils",
)
