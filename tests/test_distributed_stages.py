"""The distributed stages (ddp, fsdp, tp) on real groups of two processes: their rows on the
emulated neuron device and on the CPU (gloo), how a rank's crash, hang, raise, kill or memory
run-out ends its group (the stage's status, with which rank did what; nothing left running),
the world size as a setting (stage groups, reuse keys, resume), and what a distributed task asks
of Ray. Faults are placed with the test-only hook (`runners/faults.py`): a rank raises inside a
collective its peer must then wait in, so "waiting" is a fact, not a race."""

from __future__ import annotations

import json
import os
import tempfile
import uuid

import pytest

from ground.errors import EnvironmentFault, UsageError
from ground.schema import Stage
from runners import containment, faults
from runners import stages as stage_registry
from runners.settings import ModelSettings
from sweep.commands.options import stage_list
from tests.neuron_support import forked
from tests.test_runner import tiny

MARK = "HFSWEEP_TEST_GROUP"
STAGES = ("load", "forward", "backward")


def _mark() -> str:
    """Mark this (forked, throwaway) test process: every rank it starts inherits the mark."""
    value = uuid.uuid4().hex
    os.environ[MARK] = value
    return value


def _inject(*rules: dict) -> str:
    state = tempfile.mkdtemp(prefix="faults-")
    os.environ[faults.ENV] = json.dumps(list(rules))
    os.environ[faults.STATE_ENV] = state
    return state


def _nothing_left(mark: str) -> None:
    left = containment.processes_with_env(MARK, mark)
    assert left == [], f"processes outlived their group: {left}"


def _llama():
    return tiny("llama", "LlamaForCausalLM")


# ---- the stages ---------------------------------------------------------------------------


@pytest.mark.slow
@forked
def test_fsdp_passes_on_the_cpu_and_a_model_without_a_plan_skips_tp() -> None:
    from runners.distributed.group import close_warm_group
    from runners.isolation import run_isolated

    mark = _mark()
    settings = ModelSettings(
        device="cpu", stages=(*STAGES, "fsdp", "tp"), world_size=2, timeout_s=300
    )
    outcome = run_isolated(tiny("vit", "ViTForImageClassification"), settings)
    rows = {r.stage: r for r in outcome.stages}
    assert list(rows) == [*STAGES, "fsdp", "tp"]  # the model's own stages, then the groups
    fsdp, tp = rows["fsdp"], rows["tp"]
    assert fsdp.status == "pass", fsdp.error_message
    ops = {c["op"] for c in fsdp.collectives or []}
    assert "c10d::allgather" in ops and "c10d::reduce_scatter" in ops
    assert all(c["evidence"] is None for c in fsdp.collectives or [])  # the CPU declares none
    assert tp.status == "skip" and tp.reason == "no_tp_plan"
    assert "no tensor-parallel plan for vit" in (tp.error_message or "")
    assert outcome.timings["group_starts"] == 1  # both stages on this process's warm group
    close_warm_group()
    _nothing_left(mark)


# ---- a rank that fails ends its group ----------------------------------------------------------


def _ddp(device: str, **settings):
    from runners.distributed.group import run_group

    task = ModelSettings(device=device, stages=(*STAGES, "ddp"), world_size=2, **settings)
    return run_group(_llama(), task, Stage.DDP, spawn=False)


@pytest.mark.slow
@forked
def test_a_rank_over_its_memory_budget_is_oom() -> None:
    mark = _mark()
    _inject({"at": "rank1:stage:ddp", "fault": "alloc"})
    result = _ddp("cpu", timeout_s=300, memory_limit=1 << 30)
    assert result.status == "oom" and result.failed_rank == 1
    assert result.error_message.startswith("rank 1 of 2:")
    _nothing_left(mark)


@pytest.mark.slow
@forked
def test_a_rank_killed_from_outside_is_the_environment() -> None:
    mark = _mark()
    state = _inject({"at": "rank0:stage:ddp", "fault": "kill"})
    with pytest.raises(EnvironmentFault, match="SIGKILL"):
        _ddp("cpu", timeout_s=300)
    assert len(faults.fired(state)) == 1
    _nothing_left(mark)


@pytest.mark.slow
@forked
def test_a_rank_that_crashes_is_a_crash_naming_it() -> None:
    mark = _mark()
    _inject({"at": "rank1:stage:ddp", "fault": "segfault"})
    result = _ddp("cpu", timeout_s=300)
    assert result.status == "crash" and result.failed_rank == 1
    assert "SIGSEGV" in result.error_message
    _nothing_left(mark)


@pytest.mark.slow
@forked
def test_a_rank_that_hangs_is_a_timeout_naming_it_not_the_rank_waiting_for_it() -> None:
    mark = _mark()
    # The order is explicit: no rank's deadline starts until rank 0 has said it waits in its
    # first collective (DDP's check of the parameters across ranks, an all-gather): rule 1
    # fires there, and rule 2 holds the launcher's deadlines until it has.
    state = _inject(
        {"at": "rank1:stage:ddp", "fault": "hang"},
        {"at": "rank0:collective:allgather", "fault": "sleep:0"},
        {"at": "deadline", "fault": "after:1"},
    )
    result = _ddp("neuron", timeout_s=5)
    assert faults.fired(state, 1), "rank 0 never waited in its all-gather"
    assert result.status == "timeout" and result.failed_rank == 1, result.error_message
    assert "ddp did not finish within 5 s" in result.error_message  # each rank's own time
    assert "rank 0 ran past its deadline, waiting in c10d::allgather" in result.error_message, (
        result.error_message
    )
    _nothing_left(mark)


@pytest.mark.slow
@forked
def test_ddp_fsdp_and_tp_on_the_emulated_device() -> None:
    """The three stages on the emulated device, on two warm groups (a start of two ranks costs
    seconds of CPU: one group serves several assertions).

    The first group: T5 (a CPU fallback on the emulated device, no tensor-parallel plan), XLNet,
    then Llama, one start for all. The second: a rank raising while the other waits in a
    collective fails Llama's ddp and ends the group; the same stage again (its fault spent)
    gets a fresh group and passes, and Llama's other stages follow on it in the reverse order,
    so that each of its stages follows other stages in the two groups. Each row of Llama's is
    the same in both; T5's ddp is the first group's first stage."""
    from runners.distributed.group import WarmGroup

    mark = _mark()
    t5, xlnet, llama = (
        tiny("t5", "T5ForConditionalGeneration"),
        tiny("xlnet", "XLNetLMHeadModel"),
        _llama(),
    )
    task = ModelSettings(device="neuron", stages=(*STAGES, "ddp", "fsdp", "tp"), timeout_s=300)
    order = (Stage.TP, Stage.FSDP, Stage.DDP)
    with WarmGroup(task, spawn=False) as group:
        first = [group.run(t5, task, stage) for stage in (Stage.DDP, Stage.TP)]
        ddp = group.run(xlnet, task, Stage.DDP)
        shared = {stage: group.run(llama, task, stage) for stage in order}
        assert group.starts == 1 and group.warm  # one start for every stage of the models
    assert [r.status for r in first] == ["pass", "skip"], [r.error_message for r in first]
    assert first[0].fallback_op_count  # what a leaking fallback log would carry over

    # XLNet's language model leaves parameters without a gradient (mask_emb, seg_embed): DDP
    # gets them frozen, so that every bucket completes
    assert ddp.status == "pass", ddp.error_message
    assert ddp.world_size == 2 and len(ddp.rank_peak_memory_bytes or []) == 2
    assert ddp.max_abs_error is not None and ddp.max_abs_error < 1e-4
    collectives = {c["op"]: c for c in ddp.collectives or []}
    assert collectives["c10d::allreduce"]["calls"] >= 1
    assert collectives["c10d::allreduce"]["evidence"] == "registered"
    assert ddp.sharding_evidence == "registered"
    # torch 2.14's FSDP2 gathers with all_gather_single and reduces with
    # reduce_scatter_single, which torch declares equivalent to the snapshot's (torch 2.10's)
    # _allgather_base and _reduce_scatter_base: the snapshot's implementation runs them
    fsdp = shared[Stage.FSDP]
    assert fsdp.status == "pass", fsdp.error_message
    assert fsdp.max_abs_error is not None and fsdp.max_abs_error < 1e-4
    collectives = {c["op"]: c for c in fsdp.collectives or []}
    for name in ("c10d::all_gather_single", "c10d::reduce_scatter_single"):
        assert collectives[name]["evidence"] == "renamed_since_profile", name
    assert fsdp.sharding_evidence == "renamed_since_profile"
    assert fsdp.unsharded_peak_memory_bytes and fsdp.unsharded_peak_memory_bytes > 0
    tp = shared[Stage.TP]
    assert tp.status == "pass", tp.error_message
    assert tp.max_abs_error is not None and tp.max_abs_error < 1e-4
    evidence = {c["op"]: c["evidence"] for c in tp.collectives or []}
    assert set(evidence.values()) <= {"registered", "renamed_since_profile"}, evidence
    assert evidence["c10d::allreduce"] == "registered"
    _nothing_left(mark)

    # a rank raising while the other waits in a collective fails the stage
    state = _inject({"at": "rank1:collective:allreduce", "fault": "raise", "times": 1})
    with WarmGroup(task, spawn=False) as group:
        result = group.run(llama, task, Stage.DDP)
        assert not group.warm  # a failed stage ends its group: no rank is left
        _nothing_left(mark)
        assert result.status == "fail" and result.failed_rank == 1, result.error_message
        assert result.error_message.startswith("rank 1 of 2: injected: the model fails here")
        assert (
            "rank 0 was stopped with the group, waiting in c10d::allreduce" in result.error_message
        ), result.error_message
        assert len(faults.fired(state)) == 1
        # the same stage again (its fault spent) gets a fresh group, and passes; Llama's other
        # stages follow on that group
        alone = {stage: group.run(llama, task, stage) for stage in reversed(order)}
        assert alone[Stage.DDP].status == "pass", alone[Stage.DDP].error_message
        assert group.starts == 2 and group.warm
    for stage in order:
        assert shared[stage].status == "pass", shared[stage].error_message
        a, b = _comparable(shared[stage]), _comparable(alone[stage])
        assert a == b, (stage, {k: (a[k], b[k]) for k in a if a[k] != b[k]})
        # Device memory peaks agree within 64 KiB: tp's peak on one rank was 44 KiB higher in
        # 2 of 7 runs of this test, in either group and on either rank (not yet explained);
        # what a stage leaving its sharded model behind adds is ten times that (712 KiB).
        peaks = zip(
            [shared[stage].peak_memory_bytes, *(shared[stage].rank_peak_memory_bytes or [])],
            [alone[stage].peak_memory_bytes, *(alone[stage].rank_peak_memory_bytes or [])],
            strict=True,
        )
        assert all(abs((x or 0) - (y or 0)) <= PEAK_SLACK for x, y in peaks), stage
    _nothing_left(mark)


PEAK_SLACK = 64 << 10


def _comparable(result) -> dict:
    """A distributed row's columns that must not depend on what ran before it (not its time)."""
    from dataclasses import asdict

    row = asdict(result)
    for column in ("duration_s", "peak_memory_bytes", "rank_peak_memory_bytes"):
        row.pop(column)  # the peaks are compared on their own, within PEAK_SLACK
    return row


# ---- the world size as a setting ------------------------------------------------------------


def test_the_distributed_group_and_what_its_stages_build_on():
    assert stage_list("distributed") == [Stage(s) for s in (*STAGES, "ddp", "fsdp", "tp")]
    assert set(stage_registry.group_stages("distributed")) <= set(stage_list("all"))
    assert stage_list(None) == list(
        stage_registry.default_stages()
    )  # the default stages are as before
    assert all(
        stage_registry.stage_needs()[s] == (Stage.LOAD, Stage.FORWARD, Stage.BACKWARD)
        for s in stage_registry.group_stages("distributed")
    )


def test_the_world_size_is_a_setting_only_where_a_distributed_stage_runs():
    from sweep.reuse import KeyContext

    plain = ModelSettings(stages=STAGES, world_size=4)
    assert plain.world_size is None  # nothing depends on it
    two = ModelSettings(stages=(*STAGES, "ddp"))
    assert two.world_size == 2
    four = ModelSettings(stages=(*STAGES, "ddp"), world_size=4)
    with pytest.raises(UsageError):
        ModelSettings(stages=("ddp",), world_size=0)

    class Known:
        name, emulated, compile_backend, compile_mode = "cpu", False, "inductor", None

        def profile_info(self):
            return None, None

        def identity(self):
            return {"device": self.name, "device_emulated": False, "device_profile": None}

    from runners.settings import row_settings

    rows = {w: row_settings(s, {"device": Known()}) for w, s in ((2, two), (4, four))}
    assert rows[2]["world_size"] == 2 and rows[4]["world_size"] == 4
    assert row_settings(plain, {"device": Known()})["world_size"] is None
    assert KeyContext.of(rows[2]).run_part != KeyContext.of(rows[4]).run_part


def test_a_resume_with_another_world_size_is_refused():
    from sweep.settings import check_same_settings

    with pytest.raises(UsageError, match="world_size=2"):
        check_same_settings({"run_id": "r", "world_size": 2}, {"world_size": 4})


def test_a_world_larger_than_the_machine_is_refused():
    from runners.devices import process_group_backend, ranks_available
    from runners.distributed import check_world_size

    assert process_group_backend("cpu") == "gloo" and process_group_backend("neuron") == "neuron"
    too_many = ranks_available("cpu") + 1
    with pytest.raises(UsageError, match="--world-size"):
        check_world_size(ModelSettings(stages=(*STAGES, "ddp"), world_size=too_many))


# ---- Ray ------------------------------------------------------------------------------------


def test_a_distributed_task_asks_ray_for_one_cpu_per_rank_on_the_emulator():
    from runners.devices.cuda import CudaDevice
    from runners.devices.neuron.real import RealNeuronDevice
    from runners.distributed import task_resources

    assert task_resources(ModelSettings(stages=STAGES)) == {}
    assert task_resources(ModelSettings(stages=(*STAGES, "ddp"), world_size=2)) == {"num_cpus": 2}
    neuron = ModelSettings(device="neuron", stages=(*STAGES, "tp"), world_size=2)
    assert task_resources(neuron) == {"num_cpus": 2}
    assert CudaDevice.rank_resources(2) == {"num_cpus": 1, "num_gpus": 2}
    assert RealNeuronDevice.rank_resources(2) == {"num_cpus": 1, "resources": {"neuron_cores": 2}}


def test_each_group_meets_on_its_own_loopback_port():
    from runners.distributed.group import rendezvous_store

    with rendezvous_store() as one, rendezvous_store() as two:
        assert one != two and one > 0 and two > 0
        import socket

        for port in (one, two):  # listening on loopback
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass


def test_the_ranks_results_merge_into_one_row():
    """Fallbacks summed per op over the ranks, collectives per op (calls per rank, bytes over
    the ranks), each rank's peak memory, the largest error."""
    from runners.distributed.group import RankEnd, merge
    from runners.outcome import StageResult

    def rank(peak: int, error: float, fallback_count: int) -> StageResult:
        return StageResult(
            stage="ddp",
            status="pass",
            peak_memory_bytes=peak,
            max_abs_error=error,
            fallback_call_count=fallback_count,
            fallbacks=[
                {
                    "op": "aten::histc",
                    "count": fallback_count,
                    "bytes_h2d": 8,
                    "bytes_d2h": 8,
                    "source": "eager",
                }
            ],
            collectives=[{"op": "c10d::allreduce", "calls": 2, "bytes": 100, "evidence": None}],
        )

    ends = [RankEnd(0, result=rank(10, 1e-7, 3)), RankEnd(1, result=rank(12, 2e-7, 3))]
    row = merge(Stage.DDP, ModelSettings(stages=(*STAGES, "ddp")), ends, 4.5)
    assert row.status == "pass" and row.world_size == 2 and row.duration_s == 4.5
    assert row.fallbacks == [
        {"op": "aten::histc", "count": 6, "bytes_h2d": 16, "bytes_d2h": 16, "source": "eager"}
    ]
    assert row.collectives == [
        {"op": "c10d::allreduce", "calls": 2, "bytes": 200, "evidence": None}
    ]
    assert row.rank_peak_memory_bytes == [10, 12] and row.peak_memory_bytes == 12
    assert row.max_abs_error == 2e-7


def test_a_task_asking_for_more_than_the_cluster_has_is_refused(ray_session):
    from sweep.executors import RayExecutor

    executor = RayExecutor(run_fn=lambda payload, settings: None)
    executor._check_feasible({"num_cpus": 2})  # the session's Ray has two
    with pytest.raises(UsageError, match="asks for 3 CPU"):
        executor._check_feasible({"num_cpus": 3})


def test_fsdp_shards_each_block_but_one_holding_a_tied_weight():
    """BertForMaskedLM declares BertEmbeddings and BertLayer blocks; the embeddings share their
    word embeddings with the output layer, so they stay in the root's group."""
    from transformers import BertConfig, BertForMaskedLM

    from runners.stages.distributed.sharded import shardable_blocks

    model = BertForMaskedLM(
        BertConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=100,
        )
    )
    blocks = shardable_blocks(model, list(model._no_split_modules))
    assert [type(b).__name__ for b in blocks] == ["BertLayer", "BertLayer"]


def test_each_forward_gets_fresh_mappings_of_a_batch():
    """A sentence-transformers model writes its outputs into the features dict it is given;
    a batch fed again in a second step must not carry the first step's outputs."""
    import torch

    from runners.stages.distributed.sharded import fresh

    batch = {"input": {"input_ids": torch.ones(2, 3)}}
    copy = fresh(batch)
    copy["input"]["sentence_embedding"] = torch.zeros(2)
    assert list(batch["input"]) == ["input_ids"]
    assert copy["input"]["input_ids"] is batch["input"]["input_ids"]
