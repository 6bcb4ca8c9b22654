"""The `accelerate_ddp` stage (group `hf_training`): Accelerate's `Accelerator` on a group of
ranks of the device, as `accelerate launch` runs a user's script.

A rank of the distributed stages' group (`GroupStage`: the same launch, loading, batches and
collectives log as `ddp`) joins the device's process group, shows the device to the libraries
(`Device.present_to_libraries`), and builds an `Accelerator()` with nothing set (on the CPU `cpu=True`, as `accelerate launch --cpu`
does): Accelerate
finds the distributed type by itself from the torchrun variables the rank has and the device
it detects (`MULTI_NEURON` on neuron, `MULTI_GPU` on cuda; recorded in `hf_settings`). Then
`prepare(model, optimizer, dataloader)` of a model and an AdamW made on the CPU and a
DataLoader over the ranks' batches (Accelerate gives each rank its own), `STEPS` steps of
`accelerator.backward`, `clip_grad_norm_`, `step`, `zero_grad`, and `accelerator.gather` of each
step's loss. Each step is compared with the single process on the CPU taking the same step on
the global batch, as `ddp` compares (`DdpStage.compare_step`): the gathered losses, AdamW's
moments and the parameters against AdamW's formula; the reference is put where the group stands
before the second step (`training.follow`). Parameters and optimizer state must be on the
device after the steps (`trained_on`).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch

from ground.schema import Stage
from model_configs import build
from runners.stages.distributed.sharded import GroupStage
from runners.stages.engine import StageContext, check_close
from runners.stages.hf_training.trainers import (
    TrainedElsewhere,
    _need,
    _settings,
    library_failure,
    placement,
    reset_accelerate_state,
)
from runners.stages.training.steps import MAX_GRAD_NORM, adamw, follow, snapshot, trainable

STEPS = 2


class PreparedElsewhere(RuntimeError):
    """`Accelerator.prepare` left the model's DDP wrapper or its optimizer on something other
    than the model's own parameters on the device (each said with accelerate's function)."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{what} ({where})" for what, where in problems))
        self.library_frame = problems[0][1]


def prepared_problems(
    wrapped: torch.nn.Module, inner: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> list[tuple[str, str]]:
    """What `Accelerator.prepare` got wrong for this device, each with accelerate's function
    that decided it (a mismatch would fail only later, inside DDP's forward or as an optimizer
    that never steps, with no frame of accelerate's in the traceback):
    - the device DDP was given (`device_ids`, from `accelerator.py: prepare_model`) is not the
      one the model was placed on (`state.py: set_device`);
    - the optimizer made before `prepare` still holds parameters the model no longer has:
      moving a model to a device whose tensors cannot take a CPU tensor's place in place (a
      PrivateUse1 device) makes new parameters, and Accelerate remaps an optimizer's only for
      tpu / xla (`accelerator.py: _get_parameters_to_remap`)."""
    problems = []
    ids = getattr(wrapped, "device_ids", None)
    placed = next(inner.parameters()).device
    if ids and ids != [placed.index]:
        problems.append(
            (
                f"Accelerator.prepare gave DistributedDataParallel device_ids={ids}, but placed "
                f"the model on {placed}",
                "accelerate/accelerator.py:prepare_model",
            )
        )
    own = {id(p) for p in inner.parameters()}
    stale = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in own]
    if stale:
        problems.append(
            (
                f"the optimizer still holds {len(stale)} parameters the prepared model no longer "
                f"has (on {stale[0].device}): they never step",
                "accelerate/accelerator.py:_get_parameters_to_remap",
            )
        )
    return problems


class AccelerateDdpStage(GroupStage):
    """Accelerate's `Accelerator` on `--world-size` ranks: prepare, two steps, gather."""

    name: ClassVar[Stage] = Stage.ACCELERATE_DDP

    def prepare(self, ctx: StageContext) -> None:
        _need("accelerate")
        ctx.device.present_to_libraries()
        super().prepare(ctx)

    def body(self, ctx: StageContext) -> None:
        with library_failure(ctx):
            self.steps(ctx)

    def steps(self, ctx: StageContext) -> None:
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        assert self.host is not None
        reference = copy.deepcopy(self.host)
        ref_named = trainable(reference)
        ref_optimizer = adamw([p for _, p in ref_named], reference=True)
        first_losses, unused = self.reference_step(ctx, reference, ref_optimizer)
        model = copy.deepcopy(self.host)
        for name, p in model.named_parameters():
            if name in unused:  # no gradient ever: frozen, so DDP's buckets all complete
                p.requires_grad_(False)
        # each rank's batch, once per step: Accelerate hands batch i to rank i % world
        rows = [self.batches[r] for _ in range(STEPS) for r in range(self.world)]
        with self.sharded(ctx, "Accelerator.prepare"):
            reset_accelerate_state()
            # on the CPU users say so (`accelerate launch --cpu`); elsewhere nothing is set
            on_cpu = ctx.device.torch_device.type == "cpu"
            accelerator = Accelerator(cpu=True) if on_cpu else Accelerator()
            found = accelerator.distributed_type.value
            _settings(ctx, distributed_type=found, **({"cpu": True} if on_cpu else {}))
            if accelerator.num_processes != self.world:
                raise RuntimeError(
                    f"Accelerate found {found} with {accelerator.num_processes} process(es), "
                    f"not the group's {self.world} ranks (accelerate/state.py:_prepare_backend)"
                )
            optimizer = adamw([p for _, p in trainable(model)])
            loader: Any = DataLoader(rows, batch_size=1, collate_fn=lambda b: b[0])  # type: ignore[arg-type]
            wrapped, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        inner = accelerator.unwrap_model(wrapped)
        raw = getattr(optimizer, "optimizer", optimizer)
        problems = prepared_problems(wrapped, inner, raw)
        if problems:
            raise PreparedElsewhere(problems)
        named = trainable(inner)
        for step, batch in enumerate(loader, start=1):
            if step > 1:
                follow(ref_named, ref_optimizer, named, raw)
                ref_losses, _ = self.reference_step(ctx, reference, ref_optimizer)
            else:
                ref_losses = first_losses
            before = snapshot(named)
            with self.sharded(ctx, f"Accelerate step {step}"):
                outputs = wrapped(**batch)
                loss = build.compute_loss(ctx.spec, inner, outputs, batch)
                accelerator.backward(loss)
                accelerator.clip_grad_norm_([p for _, p in named], MAX_GRAD_NORM)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                gathered = accelerator.gather(loss.detach().reshape(1))
                ctx.device.synchronize()
            check_close(
                f"the losses accelerator.gather gives after step {step}",
                torch.stack([t.reshape(()) for t in ref_losses]),
                gathered.cpu(),
                ctx,
            )
            self.compare_step(
                ctx,
                f"Accelerate step {step}",
                loss.detach(),
                ref_losses[self.rank],
                named,
                raw,
                before,
                ref_named,
                ref_optimizer,
            )
        where, n_params, n_state = placement(inner, raw)
        ctx.extra["trained_on"] = (
            f"{'+'.join(sorted(where))}: {n_params} parameters, {n_state} optimizer state tensors"
        )
        want = ctx.device.torch_device.type
        if where != {want}:
            raise TrainedElsewhere(f"trained on {sorted(where - {want})[0]}, not on {want}")
