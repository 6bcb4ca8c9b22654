"""The emulated neuron device's process group on a real group of two processes: the collectives
TorchNeuron's ProcessGroupNeuron implements, run over gloo and counted; the NotImplementedErrors
it raises or its kernels' limits make; its DTensor rules; one device per process; the device
module's streams and events; storage resizing (FSDP2's). One group run answers every test of
this module (`observed`); the data they check against is `distributed.json`, which a test here
also checks against the snapshot's own source where the mirror of it is present."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runners.devices.neuron.collectives import DATA_FILE as DATA
from tests.distributed_support import run_ranks
from tests.neuron_support import forked

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = Path("/work/.mirror/parmoham-aws+test-repo-parmoham/repo")


def _refused(fn: Any) -> dict[str, Any] | None:
    """What a call raised: its type, the op it names, the message (None: it did not raise)."""
    try:
        fn()
    except NotImplementedError as exc:
        return {"type": type(exc).__name__, "op": getattr(exc, "op", None), "text": str(exc)}
    return None


def probe(rank: int, world: int) -> dict[str, Any]:
    """Everything the tests read, on one rank of an emulated neuron group."""
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    from runners.devices import collective_log
    from runners.devices.collective_log import CollectiveLog

    dev = "neuron"
    group = dist.group.WORLD
    out: dict[str, Any] = {"backend": dist.get_backend(), "group_type": type(group).__name__}

    def values(t: torch.Tensor) -> list[float]:
        return t.cpu().tolist()

    with collective_log.collecting(CollectiveLog()) as log:
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        out["allreduce"] = values(t)
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        out["allreduce_avg"] = values(t)
        t = torch.full((3,), float(rank), device=dev)
        dist.broadcast(t, src=1)
        out["broadcast"] = values(t)
        gathered = [torch.empty(2, device=dev) for _ in range(world)]
        dist.all_gather(gathered, torch.full((2,), float(rank), device=dev))
        out["allgather"] = [values(g) for g in gathered]
        chunks = [torch.full((2,), float(rank + 10 * i), device=dev) for i in range(world)]
        mine = torch.empty(2, device=dev)
        dist.reduce_scatter(mine, chunks)
        out["reduce_scatter"] = values(mine)
        t = torch.full((2,), float(rank + 1), device=dev)
        dist.reduce(t, dst=0)
        out["reduce"] = values(t)
        dist.barrier()
        # torch 2.14's names for what the snapshot (torch 2.10) implements as _allgather_base
        # and _reduce_scatter_base; and gather_single, newer than the profile's torch
        t = torch.empty(2 * world, device=dev)
        dist.all_gather_single(t, torch.full((2,), float(rank), device=dev))
        out["all_gather_single"] = values(t)
        t = torch.empty(2 * world, device=dev)
        dist.all_gather_into_tensor(t, torch.full((2,), float(rank + 5), device=dev))
        out["all_gather_into_tensor"] = values(t)
        t = torch.empty(2, device=dev)
        dist.reduce_scatter_single(t, torch.arange(4.0, device=dev) + rank)
        out["reduce_scatter_single"] = values(t)
        t = torch.empty(2 * world, device=dev) if rank == 0 else None
        dist.gather_single(torch.full((2,), float(rank + 1), device=dev), t, dst=0)
        out["gather_single"] = values(t) if t is not None else None
        out["counted"] = log.rows()
    out["fsdp2"] = _fsdp2(rank)
    work = dist.all_reduce(torch.ones(2, device=dev), async_op=True)
    out["async_done_at_return"] = work.is_completed()
    empty = torch.empty(0, device=dev)
    dist.all_reduce(empty)  # TorchNeuron's kernel declines an empty tensor; not emulated
    out["empty_allreduce"] = "ran"
    try:
        torch.empty(2, pin_memory=True)
        out["pinned"] = "allocated"
    except (NotImplementedError, RuntimeError) as exc:
        out["pinned"] = str(exc)

    out["refused"] = {
        "alltoall": _refused(
            lambda: dist.all_to_all(
                [torch.empty(1, device=dev) for _ in range(world)],
                [torch.ones(1, device=dev) for _ in range(world)],
            )
        ),
        "alltoall_base_uneven": _refused(
            lambda: group.alltoall_base(
                torch.empty(4, device=dev), torch.ones(4, device=dev), [1, 3], [1, 3], None
            )
        ),
        "reduce_scatter_coalesced": _refused(
            lambda: group.reduce_scatter_coalesced([], [], c10d.ReduceScatterOptions())
        ),
        "send": _refused(lambda: dist.send(torch.ones(1, device=dev), dst=1 - rank)),
        "recv": _refused(lambda: dist.recv(torch.ones(1, device=dev), src=1 - rank)),
        "monitored_barrier": _refused(lambda: group.monitored_barrier()),
        "product": _refused(
            lambda: dist.all_reduce(torch.ones(1, device=dev), op=dist.ReduceOp.PRODUCT)
        ),
        "host_tensor": _refused(lambda: dist.all_reduce(torch.ones(2))),
        "all_to_all_single_uneven": _refused(
            lambda: dist.all_to_all_single(
                torch.empty(4, device=dev), torch.ones(4, device=dev), [1, 3], [1, 3]
            )
        ),
    }
    subgroups = [dist.new_group([r]) for r in range(world)]
    out["refused"]["barrier_on_a_subgroup"] = _refused(lambda: dist.barrier(subgroups[rank]))

    out["devices_per_process"] = torch.neuron.device_count()  # type: ignore[attr-defined]
    out.update(_dtensor(rank, world))
    out.update(_streams_and_storage())
    return out


def _fsdp2(rank: int) -> dict[str, Any]:
    """Two steps of FSDP2 (`fully_shard` per layer) on the device, against the same steps on
    one process on the CPU: the losses, and the collectives FSDP2 called."""
    import torch
    from torch.distributed.fsdp import fully_shard

    from runners.devices import collective_log
    from runners.devices.collective_log import CollectiveLog

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    batch = torch.arange(32.0).reshape(4, 8) / 32
    reference, losses = build(), []
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        loss = reference(batch).square().mean()
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model = build().to("neuron")
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sharded = []
    with collective_log.collecting(CollectiveLog()) as log:
        for _ in range(2):  # every rank feeds the same batch: the loss is the reference's
            loss = model(batch.to("neuron")).square().mean()
            sharded.append(loss.item())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return {"losses": sharded, "reference": losses, "collectives": sorted(log.ops)}


def _dtensor(rank: int, world: int) -> dict[str, Any]:
    """TorchNeuron's DTensor registrations, and the fused attention on head-sharded inputs."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    registered = sorted(
        f"aten::{op._schema.name.split('::', 1)[1]}"
        for op in propagator.op_strategy_funcs
        if "overrideable" in str(op) or op._schema.name in ("aten::linear", "aten::linear_backward")
    )
    mesh = init_device_mesh("neuron", (world,))
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v)
    expected.sum().backward()
    sharded = [
        distribute_tensor(x.detach().to("neuron"), mesh, [Shard(1)]).requires_grad_()
        for x in (q, k, v)
    ]
    out = F.scaled_dot_product_attention(*sharded)
    out.sum().backward()
    local = out.to_local().cpu()
    heads = slice(rank * 4 // world, (rank + 1) * 4 // world)
    by_sequence = [distribute_tensor(x.detach().to("neuron"), mesh, [Shard(2)]) for x in (q, k, v)]
    sequence_out = F.scaled_dot_product_attention(*by_sequence).full_tensor().cpu()
    return {
        "sequence_sharded_error": float((sequence_out - expected.detach()).abs().max()),
        "sharding_registered": registered,
        "attention_placements": [str(p) for p in out.placements],
        "attention_error": float((local - expected[:, heads].detach()).abs().max()),
        "attention_grad_error": float(
            (sharded[0].grad.to_local().cpu() - q.grad[:, heads]).abs().max()
        ),
    }


def _streams_and_storage() -> dict[str, Any]:
    import torch

    module = torch.neuron  # type: ignore[attr-defined]
    stream = module.Stream(priority=-1)
    with module.stream(stream):
        inside = module.current_stream() is stream
    event = module.Event()
    event.record()
    stream.wait_event(event)
    t = torch.arange(8.0, device="neuron")
    view = t[2:4]
    storage = t.untyped_storage()
    storage.resize_(0)
    freed = storage.nbytes()
    storage.resize_(8 * 4)
    view.copy_(torch.tensor([7.0, 9.0]))
    return {
        "stream_api": {
            "current_inside": inside,
            "current_after": module.current_stream() is module.default_stream(),
            "event_done": event.query(),
        },
        "resize": {"freed": freed, "back": storage.nbytes(), "seen": t[2:4].cpu().tolist()},
    }


@pytest.fixture(scope="module")
def observed() -> list[dict[str, Any]]:
    return run_ranks(probe, device="neuron", world=2)


def test_it_registers_as_backend_neuron_for_the_device(observed):
    for rank in observed:
        assert rank["backend"] == "neuron"
        assert rank["group_type"] == "ProcessGroupNeuron"


def test_its_collectives_run_over_the_ranks(observed):
    r0, r1 = observed
    assert r0["allreduce"] == r1["allreduce"] == [3.0] * 4
    assert r0["allreduce_avg"] == [1.5] * 4
    assert r0["broadcast"] == r1["broadcast"] == [1.0] * 3
    assert r0["allgather"] == [[0.0, 0.0], [1.0, 1.0]]
    assert r0["reduce_scatter"] == [1.0, 1.0]  # 0 + 1 (chunk 0 of each rank)
    assert r1["reduce_scatter"] == [21.0, 21.0]  # 10 + 11
    assert r0["reduce"] == [3.0, 3.0]  # the root has the sum
    assert r1["reduce"] == [2.0, 2.0]  # the others keep their own


def test_torchs_newer_names_run_the_snapshots_collectives(observed):
    """torch 2.14 calls ProcessGroup.all_gather_single and reduce_scatter_single where torch
    2.10 (the snapshot's) called _allgather_base and _reduce_scatter_base: the emulated group
    runs the snapshot's implementation under the new name, and counts it by that name."""
    r0, r1 = observed
    assert r0["all_gather_single"] == r1["all_gather_single"] == [0.0, 0.0, 1.0, 1.0]
    assert r0["all_gather_into_tensor"] == [5.0, 5.0, 6.0, 6.0]  # a forwarder to it
    assert r0["reduce_scatter_single"] == [1.0, 3.0]  # [0, 1] + [1, 2]
    assert r1["reduce_scatter_single"] == [5.0, 7.0]  # [2, 3] + [3, 4]
    assert r0["gather_single"] == [1.0, 1.0, 2.0, 2.0] and r1["gather_single"] is None
    counted = {c["op"]: c for c in r0["counted"]}
    assert counted["c10d::all_gather_single"]["calls"] == 2
    assert counted["c10d::reduce_scatter_single"]["calls"] == 1
    assert "c10d::_allgather_base" not in counted


def test_fsdp2_runs_through_the_snapshots_all_gather_and_reduce_scatter(observed):
    for rank in observed:
        fsdp = rank["fsdp2"]
        assert fsdp["losses"] == pytest.approx(fsdp["reference"], rel=1e-5)
        assert {"c10d::all_gather_single", "c10d::reduce_scatter_single"} <= set(
            fsdp["collectives"]
        )


def test_what_each_newer_name_rests_on():
    """A renamed collective's verdict names torch's declaration and the snapshot's method; a
    name newer than the profile's torch with no declared equivalent is unverified."""
    from runners.devices.neuron import collectives

    gather = collectives.collective("c10d::all_gather_single")
    assert gather is not None and gather.status == collectives.RENAMED
    assert gather.stands_for == "_allgather_base"
    assert gather.evidence == "renamed_since_profile"
    assert "deprecated forwarder" in gather.where and "backend.py:546" in gather.where
    scatter = collectives.collective("reduce_scatter_single")
    assert scatter is not None and scatter.stands_for == "_reduce_scatter_base"
    assert collectives.evidence("c10d::gather_single") == "newer_than_profile"
    assert collectives.evidence("c10d::send") == "raises"  # the snapshot's torch had send
    assert collectives.evidence("c10d::allreduce") == "registered"


def test_each_collective_is_counted_with_its_input_bytes(observed):
    counted = {c["op"]: c for c in observed[0]["counted"]}
    assert counted["c10d::allreduce"] == {"op": "c10d::allreduce", "calls": 2, "bytes": 32}
    assert counted["c10d::broadcast"]["bytes"] == 12
    assert counted["c10d::reduce_scatter"]["bytes"] == 16  # two chunks of two floats
    assert counted["c10d::barrier"]["calls"] == 1


def test_it_raises_where_torchneuron_raises_or_limits(observed):
    refused = observed[0]["refused"]
    for name, op in [
        ("alltoall", "c10d::alltoall"),  # its all-to-all kernel takes 4, 8, 16, 32k ranks
        ("alltoall_base_uneven", "c10d::alltoall_base"),
        ("reduce_scatter_coalesced", "c10d::reduce_scatter_coalesced"),
        ("send", "c10d::send"),
        ("recv", "c10d::recv"),
        ("monitored_barrier", "c10d::monitored_barrier"),
        ("product", "c10d::allreduce"),  # its kernels reduce with SUM, AVG, MIN, MAX
        ("host_tensor", "c10d::allreduce"),
        ("all_to_all_single_uneven", "c10d::all_to_all_single"),  # alltoall_base's limit
        ("barrier_on_a_subgroup", "c10d::barrier"),
    ]:
        assert refused[name] is not None, name
        assert refused[name]["type"] == "CollectiveNotImplemented", name
        assert refused[name]["op"] == op, (name, refused[name])
    assert "group of 2 ranks" in refused["alltoall"]["text"]
    assert "even split sizes" in refused["alltoall_base_uneven"]["text"]
    assert (
        "all_to_all_single (the snapshot's alltoall_base)"
        in (refused["all_to_all_single_uneven"]["text"])
    )
    assert "default group" in refused["barrier_on_a_subgroup"]["text"]
    assert "98154b8" in refused["send"]["text"]


def test_one_device_per_process(observed):
    assert [r["devices_per_process"] for r in observed] == [1, 1]


def test_the_same_dtensor_sharding_registrations(observed):
    data = json.loads(DATA.read_text())
    assert observed[0]["sharding_registered"] == sorted(e["op"] for e in data["sharding"])


def test_the_fused_attention_runs_on_head_sharded_dtensors(observed):
    for rank in observed:
        assert rank["attention_placements"] == ["S(1)"]  # the heads, as the inputs
        assert rank["attention_error"] < 1e-5
        assert rank["attention_grad_error"] < 1e-5


def test_inputs_sharded_by_sequence_give_the_single_process_attention(observed):
    """No strategy computes attention over a shard of the keys (TorchNeuron's rule that shards
    q, k and v together on the sequence is left out)."""
    assert all(rank["sequence_sharded_error"] < 1e-5 for rank in observed)


def test_nothing_is_asynchronous(observed):
    assert all(rank["async_done_at_return"] for rank in observed)


def test_limits_of_torchneurons_kernels_beyond_those_are_not_emulated(observed):
    assert observed[0]["empty_allreduce"] == "ran"


def test_the_emulated_device_cannot_pin_host_memory(observed):
    assert "getPinnedMemoryAllocator" in observed[0]["pinned"]


def test_torchs_python_hooks_cannot_resize_a_device_storage():
    """What torch 2.14 lets a Python PrivateUse1 backend's hooks answer (why storages are
    resized another way)."""
    import torch

    hooks = torch._C._acc.PrivateUse1Hooks  # type: ignore[attr-defined]
    assert sorted(n for n in dir(hooks) if not n.startswith("_")) == [
        "has_primary_context",
        "is_available",
        "is_built",
    ]


def test_the_device_module_has_streams_and_events(observed):
    assert observed[0]["stream_api"] == {
        "current_inside": True,
        "current_after": True,
        "event_done": True,
    }


def test_device_storages_resize_in_place(observed):
    assert observed[0]["resize"] == {"freed": 0, "back": 32, "seen": [7.0, 9.0]}


def test_every_collective_of_the_data_is_implemented_or_refused():
    """The emulated group defines a method for each collective ProcessGroupNeuron implements,
    and refuses each one it raises on or lacks (`distributed.json`)."""
    from runners.devices.neuron import collectives
    from runners.devices.neuron.process_group import ProcessGroupNeuron

    for name, entry in collectives.collectives().items():
        doc = ProcessGroupNeuron.__dict__[name].__doc__ or ""
        if entry.status == collectives.RAISES:
            assert doc.startswith("Raises NotImplementedError"), name
        elif entry.status == collectives.ABSENT:
            assert doc.startswith("c10d's base ProcessGroup"), name
        elif entry.status == collectives.RENAMED:
            assert doc.startswith(f"The snapshot's {entry.stands_for}"), name
        else:
            assert not doc.startswith(("Raises", "c10d's base", "The snapshot's")), name


@pytest.mark.skipif(not SNAPSHOT.is_dir(), reason="the TorchNeuron snapshot's mirror is absent")
def test_the_data_is_what_the_script_extracts(tmp_path):
    """distributed.json is the extraction script's output for the snapshot's commit."""
    data = json.loads(DATA.read_text())
    out = tmp_path / "distributed.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "extract_torchneuron_distributed.py"),
            str(SNAPSHOT),
            "--commit",
            data["source"]["commit"],
            "--out",
            str(out),
        ],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
    )
    assert json.loads(out.read_text()) == data


def _base_probe_group() -> Any:
    import torch
    from torch._C._distributed_c10d import ProcessGroup

    from runners.devices.neuron import collectives

    def done() -> Any:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result([])
        return torch._C._distributed_c10d._create_work_from_future(future)

    class Probe(ProcessGroup):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(0, 1)
            self.calls: list[str] = []

    def recorder(name: str) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return done()

        return method

    for name, entry in collectives.facts()["collectives"].items():
        if entry["status"] != collectives.ABSENT:
            setattr(Probe, name, recorder(name))
    return Probe()


def test_what_the_group_lacks_it_does_as_c10ds_base_class_does():
    """Measured on the installed torch: a Python group without a method gets c10d's base
    class's, which forwards to an older method (`BASE_FORWARDS`: torch declaring the two
    equivalent) or raises RuntimeError."""
    import torch
    from torch._C import _distributed_c10d as c10d

    from runners.devices.neuron import collectives

    BASE_FALLBACKS = collectives.BASE_FORWARDS

    group = _base_probe_group()
    t, o = torch.ones(2), torch.empty(2)
    calls = {
        "send": lambda: group.send([t], 0, 0),
        "recv": lambda: group.recv([t], 0, 0),
        "all_gather_single": lambda: group.all_gather_single(o, t, c10d.AllgatherOptions()),
        "all_gather_single_coalesced": lambda: group.all_gather_single_coalesced(
            [o], [t], c10d.AllgatherOptions()
        ),
        "reduce_scatter_single": lambda: group.reduce_scatter_single(
            o, t, c10d.ReduceScatterOptions()
        ),
        "reduce_scatter_single_coalesced": lambda: group.reduce_scatter_single_coalesced(
            [o], [t], c10d.ReduceScatterOptions()
        ),
        "all_to_all_single": lambda: group.all_to_all_single(o, t, [], [], c10d.AllToAllOptions()),
        "gather_single": lambda: group.gather_single(o, t, c10d.GatherOptions()),
        "gather_into_tensor": lambda: group.gather_into_tensor(o, t, c10d.GatherOptions()),
    }
    data = collectives.facts()["collectives"]
    absent = [n for n, e in data.items() if e["status"] == collectives.ABSENT]
    assert sorted(absent) == sorted(calls)
    for method in absent:
        group.calls.clear()
        if method in BASE_FALLBACKS:
            calls[method]()
            assert group.calls == [BASE_FALLBACKS[method]], method
        else:
            with pytest.raises(RuntimeError, match="No backend type associated"):
                calls[method]()


@forked
def test_a_models_own_process_keeps_the_device_as_before() -> None:
    """Only a rank of a distributed stage gets the group's pieces: the model's own process
    (the single-device stages) has no process group, no streams, and storages as torch has."""
    import torch
    import torch.distributed as dist

    from runners.devices import get_device
    from runners.devices.neuron.state import STATE

    get_device("neuron").setup()
    assert not STATE.distributed and not STATE.process_group_registered
    assert "NEURON" not in dist.Backend._plugins
    assert not hasattr(torch.neuron, "Stream")  # type: ignore[attr-defined]
    assert torch.UntypedStorage.resize_ is torch._C.StorageBase.resize_
