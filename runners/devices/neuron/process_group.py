"""The emulated device's process group: ProcessGroupNeuron as the snapshot has it, run over gloo.

TorchNeuron registers `ProcessGroupNeuron`, a Python subclass of c10d's `ProcessGroup`, as
backend `"neuron"` for device `"neuron"` (torch_neuronx/distributed/backend.py). This class is
the emulator's stand-in for it, with the same shape, so that PyTorch reaches it by the same
routes (DDP's reducer, FSDP2, DeviceMesh and DTensor through the group's methods):
- the collectives ProcessGroupNeuron implements (`collectives.py`, from `distributed.json`) run
  on the host memory behind the device tensors, over a gloo group of the same ranks on
  loopback, each counted (`runners.devices.collective_log`: op, calls, input bytes);
- where it raises NotImplementedError, or limits a collective, so does this class:
  `reduce_scatter_coalesced`, `recv_anysource`, `monitored_barrier`; all-to-all with splits
  other than equal or all ones, or a group size its kernel does not take; a barrier on a
  group other than the default; a reduction its kernels do not take (the kernel declines the
  call, and a collective has no CPU fallback);
- what it does not define (send and recv among them) is left to c10d's base class, as it is
  for ProcessGroupNeuron: where the base class answers RuntimeError "No backend type associated
  with device type neuron", the emulated group raises NotImplementedError naming the
  collective instead (so that a row names it);
- the snapshot was written for torch 2.10; the running torch calls some collectives by newer
  names (`collectives.py`, `skew.py`). One that torch declares equivalent to a method the
  snapshot implements (`all_gather_single` for `_allgather_base`, `reduce_scatter_single` for
  `_reduce_scatter_base`, `all_to_all_single` for `alltoall_base`) runs that implementation,
  with its limits, under the new name (recorded as the new name, evidence
  `renamed_since_profile`); one with no declared equivalent (`gather_single`) runs over gloo
  and is recorded as `newer_than_profile`: unverified, the profile cannot say;
- its tensors must be on the device (the kernels decline host tensors);
- it registers the same `_c10d_functional` op for the device (all_gather_into_tensor_out,
  which reaches the group's `_allgather_base`; the others take c10d's own route).
Every collective completes before it returns (its `Work` is done); nothing is asynchronous.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d
from torch._C._distributed_c10d import ProcessGroup

from runners import faults
from runners.devices import collective_log
from runners.devices.neuron import collectives
from runners.devices.neuron.state import BACKEND_NAME, STATE, is_neuron
from runners.devices.neuron.storage import host_alias

GLOO_PREFIX = "emulated-neuron-gloo"
HOST = "127.0.0.1"  # the gloo group behind it stays on loopback


class CollectiveNotImplemented(NotImplementedError):
    """A collective ProcessGroupNeuron does not run (`op`: `c10d::name`, for the row)."""

    def __init__(self, message: str, *, op: str):
        super().__init__(message)
        self.op = op

    def __reduce__(self) -> Any:  # keep `op` across processes
        return (_rebuild, (str(self), self.op))


def _rebuild(message: str, op: str) -> CollectiveNotImplemented:
    return CollectiveNotImplemented(message, op=op)


def _not_implemented(name: str, why: str, called_as: str | None = None) -> CollectiveNotImplemented:
    """The snapshot refusing `name`; `called_as`: the newer name torch called it by."""
    found = collectives.collective(name)
    where = found.where if found is not None else "torch_neuronx/distributed/backend.py"
    commit = collectives.facts()["source"]["commit"][:7]
    label = f"{called_as} (the snapshot's {name})" if called_as and called_as != name else name
    return CollectiveNotImplemented(
        f"ProcessGroupNeuron.{label}: {why} (TorchNeuron {commit}, {where})",
        op=f"{collectives.OP_PREFIX}{called_as or name}",
    )


def _flat(tensors: Any) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    return [t for x in tensors for t in _flat(x)]


def _tensors_in(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors_in(v)]
    return []


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _flat(tensors))


def _reduce_name(op: Any) -> str:
    """ReduceOp -> its name (SUM, AVG, PREMUL_SUM, ...)."""
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


class _Host:
    """CPU tensors over the device tensors' memory; a non-contiguous one gets a contiguous
    copy, written back by `write_back` (outputs)."""

    def __init__(self) -> None:
        self._back: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        alias = host_alias(t) if is_neuron(t) else t
        if alias.is_contiguous():
            return alias
        buffer = alias.contiguous()
        self._back.append((alias, buffer))
        return buffer

    def write_back(self) -> None:
        for alias, buffer in self._back:
            alias.copy_(buffer)


# c10d's stubs type each collective for its callers; the group implements them as c10d calls
# them (its Python methods override the C++ ones), so the base is taken untyped.
_ProcessGroup: Any = ProcessGroup


def _done(outputs: Any) -> Any:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(outputs)
    return torch._C._distributed_c10d._create_work_from_future(future)


class ProcessGroupNeuron(_ProcessGroup):
    """The emulated ProcessGroupNeuron (see the module's docstring)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta | None):
        super().__init__(rank, size)
        self._group_name: str | None = None
        self._called_as: str | None = None  # the newer name a renamed collective was called by
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=HOST)]
        options._timeout = timeout or datetime.timedelta(minutes=30)
        self._gloo: Any = dist.ProcessGroupGloo(
            dist.PrefixStore(GLOO_PREFIX, store), rank, size, options
        )
        check_one_device()

    # identity, as ProcessGroupNeuron answers it ---------------------------------------------

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return BACKEND_NAME

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str | None:
        return self._group_name

    def _get_backend(self, device: Any) -> ProcessGroupNeuron:
        return self

    @property
    def _device_types(self) -> list[torch.device]:
        return [torch.device(BACKEND_NAME)]

    # the run of one collective ------------------------------------------------------------

    def _refused(self, name: str, why: str) -> CollectiveNotImplemented:
        return _not_implemented(name, why, self._called_as)

    @contextlib.contextmanager
    def _renamed(self, name: str) -> Iterator[None]:
        """Run the snapshot's implementation as `name`, the newer name torch called."""
        self._called_as = name
        try:
            yield
        finally:
            self._called_as = None

    @contextlib.contextmanager
    def _collective(self, name: str, tensors: Any) -> Iterator[_Host]:
        name = self._called_as or name
        flat = _flat(tensors)
        host = [t.device for t in flat if not is_neuron(t)]
        if host:
            raise self._refused(
                name, f"every tensor must be on the neuron device, found one on {host[0]}"
            )
        with collective_log.in_collective(f"{collectives.OP_PREFIX}{name}", _nbytes(tensors)):
            faults.inject_known(f"rank{self.rank()}:collective:{name}")
            to_host = _Host()
            yield to_host
            to_host.write_back()

    def _reduction(self, name: str, opts: Any, tensors: list[torch.Tensor]) -> tuple[Any, str]:
        """The gloo ReduceOp for `opts.reduceOp` and what to do after it (AVG: divide), as
        TorchNeuron's kernels: PREMUL_SUM scales its inputs and sums; an op they do not take
        is declined (NotImplementedError)."""
        reduce = _reduce_name(getattr(opts, "reduceOp", dist.ReduceOp.SUM))
        if reduce == "PREMUL_SUM":
            _, factor = opts.reduceOp.__getstate__()
            for t in tensors:
                t.mul_(factor)
            reduce = "SUM"
        if reduce not in collectives.reduce_ops():
            raise self._refused(
                name,
                f"unsupported reduce operation {reduce!r}, supported ops: "
                f"{sorted(collectives.reduce_ops())}",
            )
        return (dist.ReduceOp.SUM if reduce == "AVG" else getattr(dist.ReduceOp, reduce)), reduce

    def _allreduce_host(self, tensors: list[torch.Tensor], opts: Any, name: str) -> None:
        with self._collective(name, tensors) as host:
            buffers = [host(t) for t in tensors]
            op, reduce = self._reduction(name, opts, buffers)
            options = c10d.AllreduceOptions()
            options.reduceOp = op
            self._gloo.allreduce(buffers, options).wait()
            if reduce == "AVG":
                for b in buffers:
                    b.div_(self.size())

    # collectives ----------------------------------------------------------------------------

    def allreduce(self, tensors: Any, opts: Any = None) -> Any:
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        self._allreduce_host(tensors, opts, "allreduce")
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        non_empty = [t for t in tensors if t.numel() > 0]
        if non_empty:
            self._allreduce_host(non_empty, opts, "allreduce_coalesced")
        return _done(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts or c10d.BroadcastOptions()
        if tensors[0].numel() == 0:
            return _done(tensors)
        self._check_root(opts.rootRank)
        with self._collective("broadcast", tensors) as host:
            options = c10d.BroadcastOptions()
            options.rootRank = opts.rootRank
            self._gloo.broadcast([host(t) for t in tensors], options).wait()
        return _done(tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts or c10d.ReduceOptions()
        self._check_root(opts.rootRank)
        # an all-reduce into copies off the root (the root's tensors get the result)
        targets = tensors if self.rank() == opts.rootRank else [t.clone() for t in tensors]
        self._allreduce_host(targets, opts, "reduce")
        return _done(tensors)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        with self._collective("_allgather_base", [input]) as host:
            out = host(output)
            self._gloo._allgather_base(out, host(input), c10d.AllgatherOptions()).wait()
        return _done([output])

    def allgather(
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> Any:
        self._check_dim0(list(input_tensors) + list(output_tensors[0]))
        with self._collective("allgather", input_tensors) as host:
            outs = [[host(t) for t in output_tensors[0]]]
            self._gloo.allgather(outs, [host(t) for t in input_tensors]).wait()
        return _done(list(output_tensors[0]))

    def allgather_coalesced(
        self,
        output_lists: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> Any:
        with self._collective("allgather_coalesced", input_tensors) as host:
            for outputs, t in zip(output_lists, input_tensors, strict=True):
                self._gloo.allgather([[host(o) for o in outputs]], [host(t)]).wait()
        return _done([t for outputs in output_lists for t in outputs])

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        pairs = [(o, i) for o, i in zip(outputs, inputs, strict=True) if i.numel() > 0]
        if pairs:
            self._check_dim0([t for pair in pairs for t in pair])
            with self._collective("allgather_into_tensor_coalesced", [i for _, i in pairs]) as host:
                for o, i in pairs:
                    self._gloo._allgather_base(host(o), host(i), c10d.AllgatherOptions()).wait()
        return _done(outputs)

    def gather(
        self,
        output_lists: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> Any:
        opts = opts or c10d.GatherOptions()
        self._check_root(opts.rootRank)
        # an all-gather on every rank (the root keeps the result)
        if self.rank() == opts.rootRank:
            outputs = list(output_lists[0])
        else:
            outputs = [torch.empty_like(input_tensors[0]) for _ in range(self.size())]
        with self._collective("gather", input_tensors) as host:
            self._gloo.allgather([[host(o) for o in outputs]], [host(input_tensors[0])]).wait()
        return _done([t for outputs in output_lists for t in outputs])

    def _reduce_scatter_host(
        self, name: str, output: torch.Tensor, chunks: Sequence[torch.Tensor], opts: Any
    ) -> None:
        """Reduce every rank's `chunks` (one per rank) and keep this rank's in `output`."""
        with self._collective(name, list(chunks)) as host:
            stacked = torch.stack([host(c).reshape(-1) for c in chunks])
            op, reduce = self._reduction(name, opts, [stacked])
            options = c10d.AllreduceOptions()
            options.reduceOp = op
            self._gloo.allreduce([stacked], options).wait()
            mine = stacked[self.rank()]
            if reduce == "AVG":
                mine = mine / self.size()
            host(output).copy_(mine.reshape(output.shape))

    def reduce_scatter(
        self,
        output_tensors: list[torch.Tensor],
        input_lists: list[list[torch.Tensor]],
        opts: Any = None,
    ) -> Any:
        self._reduce_scatter_host(
            "reduce_scatter", output_tensors[0], input_lists[0], opts or c10d.ReduceScatterOptions()
        )
        return _done(output_tensors)

    def _reduce_scatter_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> Any:
        chunks = input.reshape(self.size(), -1).unbind(0)
        self._reduce_scatter_host(
            "_reduce_scatter_base", output, chunks, opts or c10d.ReduceScatterOptions()
        )
        return _done([output])

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        opts = opts or c10d.ReduceScatterOptions()
        for o, i in zip(outputs, inputs, strict=True):
            if i.numel() > 0:
                chunks = i.reshape(self.size(), -1).unbind(0)
                self._reduce_scatter_host("reduce_scatter_tensor_coalesced", o, chunks, opts)
        return _done(outputs)

    def scatter(
        self,
        output_tensors: list[torch.Tensor],
        input_lists: list[list[torch.Tensor]],
        opts: Any = None,
    ) -> Any:
        opts = opts or c10d.ScatterOptions()
        self._check_root(opts.rootRank)
        # a reduce-scatter (sum) of the root's inputs and zeros elsewhere
        if self.rank() == opts.rootRank:
            chunks = list(input_lists[0])
        else:
            chunks = [torch.zeros_like(output_tensors[0]) for _ in range(self.size())]
        self._reduce_scatter_host("scatter", output_tensors[0], chunks, c10d.ReduceScatterOptions())
        return _done(output_tensors)

    def alltoall(
        self,
        output_tensors: list[torch.Tensor],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> Any:
        if all(t.numel() == 0 for t in input_tensors):
            return _done(list(output_tensors))
        if not collectives.all_to_all_accepts(self.size()):
            sizes = collectives.facts()["all_to_all_world_sizes"]
            raise self._refused(
                "alltoall",
                f"its all-to-all kernel declines a group of {self.size()} ranks (supported sizes: "
                f"{', '.join(map(str, sizes['sizes']))}, or multiples of {sizes['multiple_of']})",
            )
        with self._collective("alltoall", input_tensors) as host:
            send = torch.cat([host(t).reshape(-1) for t in input_tensors])
            recv = torch.empty_like(send)
            self._gloo.alltoall_base(recv, send, [], [], c10d.AllToAllOptions()).wait()
            for out, piece in zip(output_tensors, recv.chunk(self.size()), strict=True):
                host(out).copy_(piece.reshape(out.shape))
        return _done(list(output_tensors))

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int] | None,
        input_split_sizes: list[int] | None,
        opts: Any = None,
    ) -> Any:
        for what, splits in (("output", output_split_sizes), ("input", input_split_sizes)):
            if splits and not all(s == 1 for s in splits):
                raise self._refused(
                    "alltoall_base",
                    f"only even split sizes are supported, got {what}_split_sizes {list(splits)}",
                )
        inputs = list(input.chunk(self.size()))
        outputs = list(output.chunk(self.size()))
        return self.alltoall(outputs, inputs, opts)

    def barrier(self, opts: Any = None) -> Any:
        if dist.get_world_size() != self.size():
            raise self._refused("barrier", "a barrier is implemented only for the default group")
        with self._collective("barrier", []):
            self._gloo.barrier(c10d.BarrierOptions()).wait()
        return _done([])

    # newer than the snapshot, no declared equivalent: taken to run (unverified) -------------

    def _gather_one(self, name: str, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        """`gather_single` / `gather_into_tensor`: the root gets every rank's `input`, in rank
        order, in `output` (an all-gather; only the root keeps it)."""
        opts = opts or c10d.GatherOptions()
        self._check_root(opts.rootRank)
        with self._collective(name, [input]) as host:
            source = host(input).contiguous().reshape(-1)
            gathered = torch.empty(self.size() * source.numel(), dtype=source.dtype)
            self._gloo._allgather_base(gathered, source, c10d.AllgatherOptions()).wait()
            if self.rank() == opts.rootRank:
                host(output).copy_(gathered.reshape(output.shape))
        return _done([output])

    def gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._gather_one("gather_single", output, input, opts)

    def gather_into_tensor(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> Any:
        return self._gather_one("gather_into_tensor", output, input, opts)

    # checks ---------------------------------------------------------------------------------

    def _check_root(self, root: int) -> None:
        if root < 0 or root >= self.size():
            raise ValueError(f"Invalid rootRank {root} for a group of {self.size()} ranks")

    @staticmethod
    def _check_dim0(tensors: list[torch.Tensor]) -> None:
        empty = [tuple(t.shape) for t in tensors if t.dim() and t.size(0) == 0]
        if empty:
            raise ValueError(f"tensors cannot have zero size in dimension 0, found {empty[0]}")


def _refuses(name: str, why: str) -> Any:
    def method(self: ProcessGroupNeuron, *args: Any, **kwargs: Any) -> Any:
        collective_log.record(f"{collectives.OP_PREFIX}{name}", _nbytes(_tensors_in(args)))
        raise _not_implemented(name, why)

    method.__name__ = name
    method.__doc__ = f"Raises NotImplementedError: {why} (`distributed.json`)."
    return method


def _as_the_base_does(name: str) -> Any:
    """c10d's base ProcessGroup.`name` on the device: "No backend type associated with device
    type neuron", raised as NotImplementedError naming the collective."""

    def method(self: ProcessGroupNeuron, *args: Any, **kwargs: Any) -> Any:
        collective_log.record(f"{collectives.OP_PREFIX}{name}", _nbytes(_tensors_in(args)))
        raise _not_implemented(
            name,
            f"ProcessGroupNeuron defines no {name}; c10d's ProcessGroup raises RuntimeError "
            '"No backend type associated with device type neuron"',
        )

    method.__name__ = name
    method.__doc__ = f"c10d's base ProcessGroup.{name}, which raises (`distributed.json`)."
    return method


def _run_as(name: str, stands_for: str) -> Any:
    """The snapshot's `stands_for` under the newer name `name` (recorded as `name`)."""

    def method(self: ProcessGroupNeuron, *args: Any, **kwargs: Any) -> Any:
        with self._renamed(name):
            return getattr(self, stands_for)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The snapshot's {stands_for}, which torch declares equivalent to {name}."
    return method


def _add_refusals() -> None:
    """What ProcessGroupNeuron raises on (`raises`), from the data; what it does not define
    (`absent`) does what c10d's base class does, its RuntimeError raised here as
    NotImplementedError naming the collective; a newer name torch declares equivalent to one it
    implements (`renamed`) runs that one."""
    for name, entry in collectives.collectives().items():
        if entry.status == collectives.RAISES:
            setattr(ProcessGroupNeuron, name, _refuses(name, "raises NotImplementedError"))
        elif entry.status == collectives.ABSENT:
            setattr(ProcessGroupNeuron, name, _as_the_base_does(name))
        elif entry.status == collectives.RENAMED and entry.stands_for is not None:
            setattr(ProcessGroupNeuron, name, _run_as(name, entry.stands_for))
        elif not callable(ProcessGroupNeuron.__dict__.get(name)):
            raise RuntimeError(f"ProcessGroupNeuron implements {name}; the emulated group does not")


_add_refusals()


def check_one_device() -> None:
    """One device per process in a distributed group, as TorchNeuron asserts."""
    module = getattr(torch, BACKEND_NAME, None)
    count = module.device_count() if module is not None else 0
    if count != 1:
        message = collectives.facts()["one_device_per_process"]["message"]
        raise AssertionError(f"{message} ({count} devices)")


def _create(store: Any, rank: int, size: int, timeout: Any) -> ProcessGroupNeuron:
    return ProcessGroupNeuron(store, rank, size, timeout)


def all_gather_into_tensor_out(
    input: torch.Tensor, group_size: int, group_name: str, out: torch.Tensor
) -> torch.Tensor:
    """`_c10d_functional::all_gather_into_tensor_out` for the device: the group's own
    `_allgather_base` (c10d's kernel would ask the group for a backend it does not have)."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    group = _resolve_process_group(group_name)  # type: ignore[arg-type]
    group._allgather_base(out, input, c10d.AllgatherOptions())
    return out


def register_process_group() -> None:
    """Register the emulated group as backend `neuron` for the device, and the functional
    collective it serves (idempotent; after the backend is installed)."""
    if STATE.process_group_registered:
        return
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=[BACKEND_NAME])
    library = torch.library.Library("_c10d_functional", "IMPL")  # noqa: TOR901
    for op in collectives.functional_collectives():
        name = op.split("::", 1)[1]
        if name != "all_gather_into_tensor_out":
            raise RuntimeError(f"no emulated kernel for {op}")
        library.impl(name, all_gather_into_tensor_out, "PrivateUse1")
    STATE.libraries.append(library)
    STATE.process_group_registered = True
