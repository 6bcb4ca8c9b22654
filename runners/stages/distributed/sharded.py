"""The distributed stages: sharding as users shard, on a group of ranks of the device.

Each is a `StageRunner` with two sides: in the sweep's process its `own_result` runs it on a
group (`group.run_group`: one process per rank, `--world-size` of them, one result); in a rank
(`rank.py`) its `prepare` and `run` are that rank's body. Every rank loads the model as the load
stage does (the same weights from the run's seed) and makes its own batch of tiny inputs (seed
plus rank); the global batch is the ranks' batches together. A rank of the warm group builds a
model once for all of its stages (`held.held_model`) and hands each stage a copy of it as loaded,
with the random generators as the load left them, so each stage starts where a fresh process
would. Each is compared with one process
on the CPU taking the same steps (the CPU reference the other stages compare with), within the
run dtype's tolerance:
- `ddp`: `DistributedDataParallel` and one training step (forward, loss, backward with the
  gradient all-reduce, `clip_grad_norm_`, AdamW's step); the single process takes the same step
  on the global batch (each rank's loss divided by the ranks, gradients accumulated). Its loss
  for this rank's batch, AdamW's moments after the step, and the parameters against AdamW's
  formula on the group's own moments (`training.check_adamw` says why not the parameters
  themselves) must agree. A parameter that gets no gradient makes DDP look for unused ones, as
  its error tells users to;
- `fsdp`: FSDP2's `fully_shard` on every block the model declares it can be split at (its
  library's `_no_split_modules`), then on the root; two training steps, each compared in the
  same way (whole tensors gathered from the shards), the reference put where the group stands
  before the second (`training.follow`). The peak device memory of the same step unsharded, in
  each rank's process before its group step, is `unsharded_peak_memory_bytes`;
- `tp`: the model's own tensor-parallel plan, loaded sharded the way its library offers it
  (transformers: `from_pretrained(distributed_config=DistributedConfig(tp_size=N))`), one
  forward and backward on the same batch on every rank: outputs and gradients against the
  single process. A model whose library has no plan for it is a skip (`no_tp_plan`).
The collectives a rank's sharded steps run are counted (comparisons gather whole tensors
outside that count), each with the evidence its device gives (`Device.collective_evidence`).
"""

from __future__ import annotations

import copy
import gc
import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import torch

from ground.schema import SkipReason, Stage
from model_configs import build
from model_configs.libraries import get_adapter
from runners import faults
from runners.devices.collective_log import CollectiveCalls, CollectiveLog
from runners.outcome import StageResult
from runners.stages.distributed.held import before_the_group, held_model, rank_and_world
from runners.stages.distributed.status import phase
from runners.stages.engine import (
    StageContext,
    StageRunner,
    StageSkipped,
    check_close,
)
from runners.stages.training.steps import (
    adamw,
    adamw_formula,
    adamw_state,
    follow,
    optimizer_part,
    snapshot,
    trainable,
)

FSDP_STEPS = 2


def whole(t: Any) -> Any:
    """A tensor's whole value: a DTensor's gathered from its shards, anything else as is."""
    full = getattr(t, "full_tensor", None)
    return full() if callable(full) else t


def whole_tree(x: Any) -> Any:
    """`whole` through mappings (a model's outputs), lists and tuples."""
    if isinstance(x, torch.Tensor):
        return whole(x)
    if isinstance(x, dict):
        return {k: whole_tree(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [whole_tree(v) for v in x]
    return x


def fresh(x: Any) -> Any:
    """`x` with its mappings and sequences copied (the tensors in them shared)."""
    if isinstance(x, dict):
        return {k: fresh(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(fresh(v) for v in x)
    return x


def loss_backward(
    ctx: StageContext,
    call: Callable[..., Any],
    module: torch.nn.Module,
    inputs: dict,
    *,
    scale: float = 1.0,
) -> tuple[Any, torch.Tensor]:
    """Forward through `call` (the model, or its wrapper), the adapter's loss on `module`, a
    finite loss, backward of it times `scale`: (the outputs, the loss). The inputs' mappings
    are copied first: a sentence-transformers model writes its outputs into the features it
    is given, and a batch is fed again in the next step."""
    inputs = fresh(inputs)
    outputs = call(**inputs)
    loss = build.compute_loss(ctx.spec, module, outputs, inputs)
    value = float(loss.detach().float().cpu())
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is not finite: {value}")
    (loss * scale if scale != 1.0 else loss).backward()
    return outputs, loss.detach()


def shardable_blocks(model: torch.nn.Module, names: list[str]) -> list[torch.nn.Module]:
    """The modules of the classes `names` (the blocks the model can be split at) that FSDP2
    shards one by one, deepest first (a block before the block holding it). A block holding a
    parameter another module outside it shares (tied input and output embeddings) stays in its
    parent's group instead: FSDP2 manages a parameter in one group only, and users fold such a
    pair together (transformers' own FSDP plan does)."""
    holders: dict[int, set[str]] = {}
    for path, module in model.named_modules():
        for param in module._parameters.values():
            if param is not None:
                holders.setdefault(id(param), set()).add(path)
    out = []
    for path, module in model.named_modules():
        if type(module).__name__ not in names or module is model:
            continue
        inside = {f"{path}.{sub}" if sub else path for sub, _ in module.named_modules()}
        if all(holders[id(p)] <= inside for p in module.parameters()):
            out.append((path.count("."), module))
    return [m for _, m in sorted(out, key=lambda x: -x[0])]


class GroupStage(StageRunner):
    """A distributed stage: the group's launch in the sweep's process, a rank's body in a rank."""

    def __init__(self) -> None:
        self.host: torch.nn.Module | None = None  # the loaded model on the CPU
        self.batches: list[dict[str, Any]] = []  # each rank's batch, on the CPU
        self.rank, self.world = 0, 1
        self.log = CollectiveLog()

    def own_result(self, ctx: StageContext) -> StageResult | None:
        """In the sweep's process: run the stage on a group of fresh processes (this one may
        have set a device up already, which a forked rank could not use), ended with it."""
        if ctx.on_ranks is None:
            raise RuntimeError(f"{self.name.value} runs on a group of ranks, and none is at hand")
        return ctx.on_ranks(ctx.spec, ctx.settings, self.name)

    def prepare(self, ctx: StageContext) -> None:
        self.rank, self.world = rank_and_world()
        phase("loading the model")
        self.host, self.batches = held_model(ctx, self.world)
        with before_the_group():
            self.before_group(ctx)
        phase("the stage, in the group")

    def before_group(self, ctx: StageContext) -> None:
        """What the rank does with its loaded model before it joins the group."""
        return None

    def run(self, ctx: StageContext) -> None:
        faults.inject_spec(f"rank{self.rank}:stage:{self.name.value}", ctx.spec)
        ctx.extra["world_size"] = self.world
        try:
            self.body(ctx)
        finally:
            ctx.extra["collectives"] = self.log.rows()
            self.host = None

    def body(self, ctx: StageContext) -> None:
        raise NotImplementedError

    @contextmanager
    def sharded(self, ctx: StageContext, what: str) -> Iterator[None]:
        """Around the group's own work (its collectives counted)."""
        phase(what)
        with ctx.device.record_collectives() as log:
            try:
                yield
            finally:
                for op, calls in log.ops.items():
                    entry = self.log.ops.setdefault(op, CollectiveCalls())
                    entry.calls += calls.calls
                    entry.bytes += calls.bytes

    def reference_step(
        self, ctx: StageContext, reference: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[list[torch.Tensor], set[str]]:
        """One step of the single process on the global batch: each rank's loss over the
        ranks, gradients accumulated, then the optimizer's part. The ranks' losses, and the
        trainable parameters that got no gradient."""
        phase("the single-process reference")
        losses = [
            loss_backward(ctx, reference, reference, batch, scale=1.0 / self.world)[1]
            for batch in self.batches
        ]
        named = trainable(reference)
        unused = {n for n, p in named if p.grad is None}
        optimizer_part([p for _, p in named], optimizer)
        return losses, unused

    def compare_step(
        self,
        ctx: StageContext,
        what: str,
        loss: torch.Tensor,
        ref_loss: torch.Tensor,
        named: list[tuple[str, torch.nn.Parameter]],
        optimizer: torch.optim.Optimizer,
        before: dict[str, torch.Tensor],
        ref_named: list[tuple[str, torch.nn.Parameter]],
        ref_optimizer: torch.optim.Optimizer,
    ) -> None:
        """The group's step against the single process's (see the module's docstring)."""
        phase(f"comparing {what} with one process")
        check_close(f"rank {self.rank}'s loss after {what}", ref_loss, loss, ctx)
        names = {n for n, _ in named}
        states = {
            n: {
                k: whole(v) if isinstance(v, torch.Tensor) else v
                for k, v in optimizer.state.get(p, {}).items()
            }
            for n, p in named
        }
        moments = {
            f"{key}.{n}": state[key]
            for n, state in states.items()
            for key in ("exp_avg", "exp_avg_sq")
            if key in state
        }
        check_close(
            f"AdamW state after {what}",
            adamw_state([(n, p) for n, p in ref_named if n in names], ref_optimizer),
            moments,
            ctx,
        )
        check_close(
            f"parameters after {what} (AdamW's formula on the group's state)",
            adamw_formula(
                {n: whole(t) for n, t in before.items()}, states, optimizer.param_groups[0]
            ),
            {f"param.{n}": whole(p.detach()) for n, p in named},
            ctx,
        )


class DdpStage(GroupStage):
    """DistributedDataParallel: one training step against one process on the global batch."""

    name: ClassVar[Stage] = Stage.DDP

    def body(self, ctx: StageContext) -> None:
        from torch.nn.parallel import DistributedDataParallel

        assert self.host is not None
        reference = copy.deepcopy(self.host)
        ref_named = trainable(reference)
        ref_optimizer = adamw([p for _, p in ref_named], reference=True)
        ref_losses, unused = self.reference_step(ctx, reference, ref_optimizer)
        model = ctx.device.prepare_model(copy.deepcopy(self.host))
        for name, p in model.named_parameters():
            if name in unused:  # no gradient ever: frozen, so DDP's buckets all complete
                p.requires_grad_(False)
        named = trainable(model)
        inputs = ctx.device.to_device(self.batches[self.rank])
        with self.sharded(ctx, "the DDP step"):
            ddp = DistributedDataParallel(model)
            optimizer = adamw([p for _, p in named])
            _, loss = loss_backward(ctx, ddp, model, inputs)
            before = snapshot(named)
            optimizer_part([p for _, p in named], optimizer)
            ctx.device.synchronize()
        self.compare_step(
            ctx,
            "the DDP step",
            loss,
            ref_losses[self.rank],
            named,
            optimizer,
            before,
            ref_named,
            ref_optimizer,
        )


class FsdpStage(GroupStage):
    """FSDP2: `fully_shard` per block, then the root; two training steps against one process."""

    name: ClassVar[Stage] = Stage.FSDP

    def prepare(self, ctx: StageContext) -> None:
        super().prepare(ctx)
        assert self.host is not None
        phase("the same step unsharded (its peak memory)")
        ctx.device.reset_peak_memory()
        model = ctx.device.prepare_model(copy.deepcopy(self.host))
        named = trainable(model)
        optimizer = adamw([p for _, p in named])
        loss_backward(ctx, model, model, ctx.device.to_device(self.batches[self.rank]))
        optimizer_part([p for _, p in named], optimizer)
        ctx.device.synchronize()
        self.unsharded_peak = ctx.device.peak_memory_bytes()
        del model, named, optimizer
        gc.collect()

    def body(self, ctx: StageContext) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        assert self.host is not None
        ctx.extra["unsharded_peak_memory_bytes"] = self.unsharded_peak
        reference = copy.deepcopy(self.host)
        ref_named = trainable(reference)
        ref_optimizer = adamw([p for _, p in ref_named], reference=True)
        model = ctx.device.prepare_model(copy.deepcopy(self.host))
        blocks = shardable_blocks(model, get_adapter(ctx.spec.library).no_split_modules(model))
        inputs = ctx.device.to_device(self.batches[self.rank])
        with self.sharded(ctx, "fully_shard"):
            mesh = init_device_mesh(ctx.device.torch_device.type, (self.world,))
            for module in blocks:
                fully_shard(module, mesh=mesh)
            fully_shard(model, mesh=mesh)
            named = trainable(model)
            optimizer = adamw([p for _, p in named])
        for step in range(1, FSDP_STEPS + 1):
            if step > 1:
                follow(ref_named, ref_optimizer, named, optimizer, whole=whole)
            ref_losses, _ = self.reference_step(ctx, reference, ref_optimizer)
            before = snapshot(named)  # gathered whole when compared
            with self.sharded(ctx, f"FSDP step {step}"):
                _, loss = loss_backward(ctx, model, model, inputs)
                optimizer_part([p for _, p in named], optimizer)
                ctx.device.synchronize()
            self.compare_step(
                ctx,
                f"FSDP step {step}",
                loss,
                ref_losses[self.rank],
                named,
                optimizer,
                before,
                ref_named,
                ref_optimizer,
            )


class TpStage(GroupStage):
    """The model's own tensor-parallel plan: one forward and backward against one process."""

    name: ClassVar[Stage] = Stage.TP

    def __init__(self) -> None:
        super().__init__()
        self.folder: tempfile.TemporaryDirectory[str] | None = None

    def before_group(self, ctx: StageContext) -> None:
        adapter = get_adapter(ctx.spec.library)
        if adapter.tensor_parallel_plan(self.host) is None:
            raise StageSkipped(
                SkipReason.NO_TP_PLAN,
                f"{ctx.spec.library} has no tensor-parallel plan for "
                f"{ctx.spec.model_type or ctx.spec.architecture}",
            )
        self.folder = tempfile.TemporaryDirectory(prefix="hfsweep-tp-")
        adapter.save_for_tensor_parallel(ctx.spec, self.host, Path(self.folder.name))

    def body(self, ctx: StageContext) -> None:
        assert self.host is not None
        adapter = get_adapter(ctx.spec.library)
        batch = self.batches[0]  # tensor parallelism: every rank sees the same batch
        assert self.folder is not None
        with self.folder as folder, self.sharded(ctx, "loading with the plan"):
            model = adapter.load_tensor_parallel(ctx.spec, self.host, Path(folder), self.world)
        placed = {p.device.type for p in model.parameters()}
        if placed != {ctx.device.torch_device.type}:
            raise RuntimeError(
                f"the tensor-parallel model's parameters are on {sorted(placed)}, "
                f"not on {ctx.device.torch_device.type}"
            )
        inputs = ctx.device.to_device(batch)
        with self.sharded(ctx, "the tensor-parallel forward and backward"):
            model.zero_grad(set_to_none=True)
            outputs, _ = loss_backward(ctx, model, model, inputs)
            ctx.device.synchronize()
        phase("the single-process reference")
        reference = copy.deepcopy(self.host)
        ref_outputs, _ = loss_backward(ctx, reference, reference, batch)
        phase("comparing with one process")
        check_close(
            "tensor-parallel outputs", whole_tree(dict(ref_outputs)), whole_tree(dict(outputs)), ctx
        )
        expected = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
        grads = {
            n: whole(p.grad)
            for n, p in model.named_parameters()
            if n in expected and p.grad is not None
        }
        missing = sorted(set(expected) - set(grads))
        if missing:
            raise RuntimeError(
                f"{len(missing)} parameters got no gradient under the tensor-parallel plan "
                f"(first: {missing[0]})"
            )
        check_close("tensor-parallel gradients", expected, grads, ctx)
