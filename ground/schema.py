"""The row contract: one status vocabulary, one skip-reason vocabulary, one schema per table.

Everything that writes or reads the store goes through this module. Columns that other tools rely
on (`run_id`, `model_id`, `stage`, `status`, `reason`, `downloads`, `device`, `op`, `count`) never
change name.
"""

from __future__ import annotations

import enum
from typing import Any

import pyarrow as pa


class Stage(str, enum.Enum):
    """The stages' names: the closed vocabulary of the `stage` column, in run order. What each
    stage is, its group, what it builds on (one of them not passing makes it `not_run`), its
    columns and help are declared in its own folder, `runners/stages/<group>/`, and read from
    the stage registry (`runners/stages/__init__.py`)."""

    LOAD = "load"
    FORWARD = "forward"
    BACKWARD = "backward"
    COMPILE = "compile"
    GENERATE = "generate"
    OPTIMIZER = "optimizer"
    OPTIMIZER_FUSED = "optimizer_fused"
    AMP = "amp"
    LORA = "lora"
    SHAPES = "shapes"
    GENERATE_COMPILED = "generate_compiled"
    DDP = "ddp"
    FSDP = "fsdp"
    TP = "tp"
    TRAINER = "trainer"
    TRAINER_COMPILED = "trainer_compiled"
    SFT = "sft"
    ACCELERATE_DDP = "accelerate_ddp"

    def __str__(self) -> str:
        return self.value


STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)
DEFAULT_WORLD_SIZE = 2


class Status(str, enum.Enum):
    """Closed status vocabulary for one (model, stage)."""

    PASS = "pass"
    FAIL = "fail"
    FAIL_ACCURACY = "fail_accuracy"
    TIMEOUT = "timeout"
    CRASH = "crash"  # the worker process died
    OOM = "oom"
    SKIP = "skip"  # with a SkipReason
    NOT_RUN = "not_run"  # a stage it builds on did not pass (its declared needs)

    def __str__(self) -> str:
        return self.value


FAILED_STATUSES = frozenset(
    {Status.FAIL, Status.FAIL_ACCURACY, Status.TIMEOUT, Status.CRASH, Status.OOM}
)


class SkipReason(str, enum.Enum):
    """Closed vocabulary of why a model (or one stage of it) was not attempted."""

    UNSUPPORTED_LIBRARY = "unsupported_library"  # no adapter for the repo's library
    REMOTE_CODE = "remote_code"  # needs trust_remote_code, which stays off
    NO_CONFIG = "no_config"  # no config.json / model_index.json could be found
    MALFORMED_CONFIG = "malformed_config"  # the config file is not a usable JSON object
    UNKNOWN_MODEL_TYPE = "unknown_model_type"  # the installed library does not know it
    NO_MODEL_CLASS = "no_model_class"  # no class in the library can build this config
    MISSING_PACKAGE = "missing_package"  # the model needs an optional package not installed
    # a quantized checkpoint whose method has no path here (its kernels are CUDA-only, its
    # package is not installable, ...): the message names the method and what it needs
    UNSUPPORTED_QUANTIZATION = "unsupported_quantization"
    NOT_FOUND = "not_found"  # the repo does not exist (or is private)
    GATED = "gated"  # the repo needs an accepted licence to read
    DEVICE_UNSUPPORTED_FEATURE = "device_unsupported_feature"  # e.g. a dtype the device lacks
    NOT_APPLICABLE = "not_applicable"  # the stage does not apply (generate on an encoder)
    NO_TP_PLAN = "no_tp_plan"  # tp: the library has no tensor-parallel plan for the model

    def __str__(self) -> str:
        return self.value


class ConfigSource(str, enum.Enum):
    """Where the (unshrunk) config a row was built from came from."""

    HUB = "hub"  # the repo's config.json / model_index.json (cached)
    LOCAL = "local"  # a file or folder given by the user
    TRANSFORMERS_DEFAULT = "transformers_default"  # transformers' defaults for the model_type
    DIFFUSERS_DEFAULT = "diffusers_default"  # a diffusers class's default config
    # the library's own defaults for the architecture the repo id names (timm, open_clip,
    # Chronos, YOLO, pyannote, SpeechBrain: their bundled model configs)
    LIBRARY_DEFAULT = "library_default"
    # a repackaged single file (ComfyUI): mapped by the repo's name to the diffusers class whose
    # single files diffusers itself loads, built from that class's defaults
    NAME_MAPPED = "name_mapped"
    NONE = "none"  # nothing could be resolved (the row is a skip)

    def __str__(self) -> str:
        return self.value


# The config keys that say how many experts a mixture of experts routes each token to: what the
# shrink caps (model_configs' transformers rules) and what a next step reads the full-size value
# from (ground.next_steps). `top_k` last: the generic name is also a sampling setting.
EXPERTS_PER_TOKEN_KEYS = (
    "num_experts_per_tok",
    "num_experts_per_token",
    "experts_per_token",
    "moe_topk",
    "moe_top_k",
    "num_selected_experts",
    "top_k",
)


class FallbackSource(str, enum.Enum):
    """Where a CPU fallback was seen: eager dispatch, a compiled graph's unlowerable op, or
    eager dispatch inside the optimizer's part of a training step only (`clip_grad_norm_`,
    `optimizer.step()`, `zero_grad()`; an op that also fell back in that step's forward or
    backward is `eager`)."""

    EAGER = "eager"
    COMPILE = "compile"
    OPTIMIZER = "optimizer"

    def __str__(self) -> str:
        return self.value


class CompileEvidence(str, enum.Enum):
    """What a compile verdict about a graph op rests on (closed vocabulary, `compile_evidence`).

    Positive (the op lowers), strongest first: `registered` (an eager Torch-MLIR kernel's traced
    body holds it: the converter lowers it), `decomposed` (the compiler's decomposition table
    replaces it), `tested` (the device's own compile tests compile a graph holding it),
    `torch-mlir` (an upstream torch-mlir lowering pattern, third-party). `raises`: the device's
    code raises on it (evidence of absence). `none`: no evidence either way, not a confident
    failure (reports count such rows only in the upper bound of a band). Where the device's
    profile was written for an older torch than the one running: `renamed_since_profile` (the
    profile's implementation under the name the running torch declares equivalent, positive)
    and `newer_than_profile` (a name the profile's torch did not have: unverified, in the band
    as `none` is)."""

    REGISTERED = "registered"
    DECOMPOSED = "decomposed"
    TESTED = "tested"
    # the device's own implementation of an older name that the running torch calls by a newer
    # one, where torch itself declares the two equivalent (a deprecated forwarder, an alias)
    RENAMED_SINCE_PROFILE = "renamed_since_profile"
    TORCH_MLIR = "torch-mlir"
    RAISES = "raises"
    NONE = "none"
    # a name the running torch has and the profile's torch did not (nothing declares an older
    # equivalent): the profile cannot know it; unverified, like `none`
    NEWER_THAN_PROFILE = "newer_than_profile"

    def __str__(self) -> str:
        return self.value


# Positive evidence from strongest to weakest (a row records the weakest its graph ops needed).
EVIDENCE_STRENGTH: tuple[CompileEvidence, ...] = (
    CompileEvidence.REGISTERED,
    CompileEvidence.DECOMPOSED,
    CompileEvidence.TESTED,
    CompileEvidence.RENAMED_SINCE_PROFILE,
    CompileEvidence.TORCH_MLIR,
    CompileEvidence.NONE,
    CompileEvidence.NEWER_THAN_PROFILE,
)
# What no evidence decides: a stage that passed on such a verdict counts in a band's upper
# bound only (reports.query's `unverified`).
UNVERIFIED_EVIDENCE: tuple[CompileEvidence, ...] = (
    CompileEvidence.NONE,
    CompileEvidence.NEWER_THAN_PROFILE,
)


class ShapeVerdict(str, enum.Enum):
    """What the `shapes` stage found about new input shapes (`shape_verdict`); `SHAPE_ADVICE`
    says what to do about each."""

    STATIC = "static"  # every new input shape compiled a graph of its own
    DYNAMIC = "dynamic"  # later shapes reused a graph with symbolic sizes
    DATA_DEPENDENT = "data_dependent"  # an op whose output size depends on values (failing_op)
    REJECTED = "rejected"  # the device's compile rule refused the shapes (its error)

    def __str__(self) -> str:
        return self.value


SHAPE_ADVICE: dict[str, str] = {
    ShapeVerdict.STATIC.value: "static: one graph per input shape; pad inputs to fixed buckets",
    ShapeVerdict.DYNAMIC.value: "dynamic: one graph serves every input shape",
    ShapeVerdict.DATA_DEPENDENT.value: "data-dependent shapes at {op}: cannot be compiled",
    ShapeVerdict.REJECTED.value: "the device's compiler refuses symbolic shapes: compile with "
    "dynamic=False and pad inputs to fixed buckets",
}


class SizingStatus(str, enum.Enum):
    """How the full-size model's sizing went (`sizing.status`)."""

    OK = "ok"
    ERROR = "error"  # building it on the meta device raised (the error as raised)
    REFUSED = "refused"  # the config claims sizes past the guards: nothing was built
    UNSUPPORTED = "unsupported"  # no full-size builder for the model's library

    def __str__(self) -> str:
        return self.value


class OpStatus(str, enum.Enum):
    """Closed status vocabulary for one OpInfo sample (forward or backward) in the op sweep."""

    PASS = "pass"  # matched the CPU within the OpInfo's tolerance (natively or by fallback)
    FAIL = "fail"  # raised on the device (the CPU reference did not)
    WRONG = "wrong"  # ran, but outputs or gradients differ from the CPU beyond tolerance
    TIMEOUT = "timeout"  # did not finish within the per-sample timeout (the process was killed)
    CRASH = "crash"  # the process running it died (a segfault, an abort)
    OOM = "oom"  # it allocated past the memory budget, or the kernel's OOM killer killed it
    SKIP = "skip"  # not run on the device, with an OpSkipReason
    NOT_RUN = "not_run"  # backward, when the forward pass did not run to the end

    def __str__(self) -> str:
        return self.value


OP_FAILED_STATUSES = frozenset({OpStatus.FAIL, OpStatus.TIMEOUT, OpStatus.CRASH, OpStatus.OOM})


class OpSkipReason(str, enum.Enum):
    """Why a sample was not compared on the device. The first three are PyTorch's own
    applicability (`OP_SKIP_PYTORCH`), the last two the device's (`OP_SKIP_DEVICE`)."""

    DTYPE_NOT_SUPPORTED = "dtype_not_supported"  # the OpInfo does not support the dtype on CPU
    NO_AUTOGRAD = "no_autograd"  # backward: the op has no gradient for this dtype (or at all)
    PYTORCH_DECLARED = "pytorch_declared"  # the OpInfo skips its CPU comparison (non-determinism)
    REFERENCE_FAILED = "reference_failed"  # the sample raised on the CPU too: nothing to compare
    DEVICE_UNSUPPORTED_FEATURE = "device_unsupported_feature"  # a dtype the device lacks
    DEVICE_DECLARED = "device_declared"  # on the device's own skip list

    def __str__(self) -> str:
        return self.value


OP_SKIP_PYTORCH = frozenset(
    {
        OpSkipReason.DTYPE_NOT_SUPPORTED,
        OpSkipReason.NO_AUTOGRAD,
        OpSkipReason.PYTORCH_DECLARED,
        OpSkipReason.REFERENCE_FAILED,
    }
)
OP_SKIP_DEVICE = frozenset({OpSkipReason.DEVICE_UNSUPPORTED_FEATURE, OpSkipReason.DEVICE_DECLARED})


class OpExecution(str, enum.Enum):
    """How one dispatched ATen op ran on the device within a sample."""

    NATIVE = "native"  # no CPU fallback recorded while it ran
    FALLBACK = "fallback"  # it (or an op it decomposed into) fell back to the CPU
    FAILED = "failed"  # it raised
    NOT_RUN = "not_run"  # seen on the CPU reference only (the sample was skipped on the device)

    def __str__(self) -> str:
        return self.value


def run_dtypes(value: str | None) -> list[str]:
    """The dtypes a runs-table `dtype` cell names, in order (`"fp32,bf16"` -> `["fp32", "bf16"]`;
    an old single-dtype row `"fp32"` -> `["fp32"]`; none -> `[]`)."""
    return list(dict.fromkeys(d.strip() for d in (value or "").split(",") if d.strip()))


# ---------------------------------------------------------------------------------------------
# Tables. Column order is the order below; every column is nullable unless marked otherwise.

# One collective a distributed stage ran (`c10d::allreduce`).
COLLECTIVE_TYPE = pa.struct(
    [
        pa.field("op", pa.string()),
        pa.field("calls", pa.int64()),  # per rank (the most any rank made)
        pa.field("bytes", pa.int64()),  # input bytes, summed over the ranks
        pa.field("evidence", pa.string()),  # CompileEvidence; null: the device declares nothing
    ]
)

RESULTS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("rank", pa.int32()),
        pa.field("downloads", pa.int64()),
        pa.field("library", pa.string()),
        pa.field("pipeline_tag", pa.string()),
        pa.field("model_type", pa.string()),
        pa.field("architecture", pa.string()),
        pa.field("config_source", pa.string(), nullable=False),
        # the quantization method the checkpoint needs (model_configs.quantization: fp8, mxfp4,
        # compressed-tensors, awq, gptq, bitsandbytes, mlx, gguf, ...); null: not quantized
        pa.field("quantization", pa.string()),
        pa.field("config_hash", pa.string()),
        pa.field("shrunk_config_hash", pa.string()),
        pa.field("param_count", pa.int64()),
        pa.field("device", pa.string(), nullable=False),
        pa.field("device_emulated", pa.bool_(), nullable=False),
        pa.field("device_profile", pa.string()),
        pa.field("device_profile_hash", pa.string()),
        # the torch the device's profile was written for (an emulated device's: the snapshot's
        # pyproject), and the torch the row ran on: where they differ, a verdict about a name
        # newer than the profile is unverified (CompileEvidence.NEWER_THAN_PROFILE)
        pa.field("device_profile_torch", pa.string()),
        pa.field("device_torch", pa.string()),
        pa.field("dtype", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),  # SkipReason for status=skip
        pa.field("error_type", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("error_signature", pa.string()),
        pa.field("failing_op", pa.string()),  # the ATen op named by the failure, when known
        pa.field("duration_s", pa.float64()),
        pa.field("fallback_op_count", pa.int32()),  # distinct ops that fell back in this stage
        pa.field("fallback_call_count", pa.int64()),  # calls of those ops
        pa.field("bytes_h2d", pa.int64()),  # host -> device bytes (fallbacks + explicit copies)
        pa.field("bytes_d2h", pa.int64()),
        pa.field("max_abs_error", pa.float64()),  # against the CPU reference, when compared
        pa.field("graph_count", pa.int32()),  # compile stage
        pa.field("graph_break_count", pa.int32()),
        pa.field("partition_count", pa.int32()),
        pa.field("compile_s", pa.float64()),  # compile + first step
        pa.field("step_s", pa.float64()),  # steady-state step time
        pa.field("peak_memory_bytes", pa.int64()),  # the device's, in this stage (if it says)
        # The model's whole run in its own process, the same on each of its rows (null when it
        # never ran): wall seconds from the process's start to its end (device set-up, every
        # stage, compile included), and the process's peak resident host memory (its VmHWM).
        pa.field("wall_s", pa.float64()),
        pa.field("peak_host_memory_bytes", pa.int64()),
        pa.field("compile_mode", pa.string()),  # the neuron compiler's: raise / eager / partition
        pa.field("recompile_count", pa.int32()),  # compile stage: frames compiled again
        # shapes / generate_compiled: why each recompile happened (Dynamo's guard failures), and
        # the shapes stage's ShapeVerdict
        pa.field("recompile_reasons", pa.list_(pa.string())),
        pa.field("shape_verdict", pa.string()),
        # optimizer stages: native op calls of the optimizer's part of the last step (clip,
        # step, zero_grad), where the device counts its calls (the emulated device); else null
        pa.field("step_op_calls", pa.int64()),
        # compile stage, where the device's compiler says what its verdicts rest on
        # (CompileEvidence): a failure's op (`failing_op`) and its evidence, else the weakest
        # evidence any graph op needed; `none` when some op had none (they are listed next).
        # Null in stores written before the column existed (read as "not recorded").
        pa.field("compile_evidence", pa.string()),
        pa.field("unverified_ops", pa.list_(pa.string())),  # graph ops with no evidence either way
        # The distributed stages (null elsewhere): the group's ranks; the collectives it ran
        # (per rank calls, input bytes summed over ranks, what a verdict on it rests on:
        # CompileEvidence, null where the device declares nothing); each rank's peak device
        # memory and the same single-process step's; the rank whose failure decided the
        # status; and what the stage's verdict rests on (its failing collective or DTensor op,
        # else the weakest evidence of the collectives it ran).
        pa.field("world_size", pa.int32()),
        pa.field("collectives", pa.list_(COLLECTIVE_TYPE)),
        pa.field("rank_peak_memory_bytes", pa.list_(pa.int64())),
        pa.field("unsharded_peak_memory_bytes", pa.int64()),
        pa.field("failed_rank", pa.int32()),
        pa.field("sharding_evidence", pa.string()),
        # The hf_training stages (null elsewhere): where the trainer left the parameters and the
        # optimizer's state (`neuron: 24 parameters, 48 optimizer state tensors`); what the
        # stage read from or had to set on the libraries (`torch_compile_backend=neuron`,
        # `distributed_type=MULTI_NEURON`, ...); and for a failure, the innermost frame of
        # transformers / accelerate / trl / peft / datasets in its traceback
        # (`transformers/trainer.py:_inner_training_loop`): a library's device path.
        pa.field("trained_on", pa.string()),
        pa.field("hf_settings", pa.string()),
        pa.field("library_frame", pa.string()),
        pa.field("dedup_of", pa.string()),  # the model whose task produced this result, if shared
        # The task's content key: everything that can change its rows (sweep/reuse.py). Equal
        # keys give equal rows, so a later run may copy them (`hfsweep run --reuse`).
        pa.field("task_key", pa.string()),
        # the run whose task produced these rows, when they were copied from it (null: ran here)
        pa.field("reused_from", pa.string()),
        pa.field("attempt", pa.int16()),
        pa.field("worker", pa.string()),  # where it ran: Ray node id and process, or host:pid
        pa.field("finished_at", pa.timestamp("us", tz="UTC")),
    ]
)

FALLBACKS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("device", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),  # "aten::name.overload"
        pa.field("count", pa.int64(), nullable=False),
        pa.field("bytes_h2d", pa.int64()),
        pa.field("bytes_d2h", pa.int64()),
        pa.field("source", pa.string(), nullable=False),  # FallbackSource
        # what the fallback verdict rests on where it is not the profile's own word:
        # `newer_than_profile` (an op the profile's torch did not have); null: the profile's
        pa.field("evidence", pa.string()),
        pa.field("downloads", pa.int64()),  # copied from the model row, for ranking ops
        # the dtype of the model's rows; null in parts written when a run had one dtype
        pa.field("dtype", pa.string()),
    ]
)

# A model whose default implementation failed, run again with one switch of its own code
# (`experts_implementation=batched_mm`, `attn_implementation=eager`: runners/alternatives.py):
# one row per model x dtype x switch value x stage, with the results table's columns for a
# stage's outcome. The results table keeps the default implementation's rows alone (the
# headline and the funnel count those); a next step that says "passes with ..." rests on these.
_ALTERNATIVE_STAGE_COLUMNS = (
    "stage", "status", "reason", "error_type", "error_message", "error_signature", "failing_op",
    "duration_s", "fallback_op_count", "fallback_call_count", "max_abs_error",
    "compile_evidence", "unverified_ops", "wall_s",
    "dedup_of", "task_key", "reused_from", "attempt", "finished_at",
)  # fmt: skip
ALTERNATIVES_SCHEMA = pa.schema(
    [
        *(RESULTS_SCHEMA.field(n) for n in ("run_id", "model_id", "downloads", "device")),
        RESULTS_SCHEMA.field("device_emulated"),
        RESULTS_SCHEMA.field("dtype"),
        # the switch and its value, `experts_implementation=batched_mm`
        pa.field("implementation", pa.string(), nullable=False),
        *(RESULTS_SCHEMA.field(n) for n in _ALTERNATIVE_STAGE_COLUMNS),
    ]
)

# What a dedup group shares, stored once per run and (original, shrunk) config pair instead of
# on every stage row of every member; readers join it back on both hashes.
CONFIGS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("config_hash", pa.string()),  # the original (full-size) config
        pa.field("shrunk_config_hash", pa.string(), nullable=False),
        pa.field("library", pa.string()),
        pa.field("architecture", pa.string()),
        pa.field("shrink_changes", pa.string()),  # JSON: {"dotted.key": [original, shrunk]}
        pa.field("shrunk_config", pa.string()),  # JSON of the config the model was built from
    ]
)

# What planning each model gave (`sweep.plans`): a run with --reuse takes an earlier run's plan of
# an entry whose inputs have not changed instead of planning it again.
PLANS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("plan_key", pa.string(), nullable=False),  # the hash of what it planned from
        pa.field("plan", pa.string(), nullable=False),  # JSON: the spec or decided outcome
    ]
)

# The model at full size, once per run and full-size config (`config_hash`, the results rows'),
# one row per hardware type of the run's device (null `hardware`: a device with none, or a
# failed sizing): its parameters and bytes, and the cores needed to serve and fine-tune it by
# the formula of docs/sizing.md.
SIZING_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("config_hash", pa.string(), nullable=False),
        # ConfigSource: the repo's own config, or a library's default (as the results rows say)
        pa.field("config_source", pa.string()),
        pa.field("architecture", pa.string()),  # the class sized
        pa.field("status", pa.string(), nullable=False),  # SizingStatus
        pa.field("error_type", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("parameters", pa.int64()),  # tied weights once
        pa.field("buffers", pa.int64()),  # elements
        pa.field("bytes_fp32", pa.int64()),  # weights and buffers at each dtype
        pa.field("bytes_bf16", pa.int64()),
        pa.field("bytes_fp16", pa.int64()),
        pa.field("bytes_fp8", pa.int64()),
        pa.field("kv_bytes_per_token", pa.int64()),  # bf16, layers without a window
        pa.field("kv_window_bytes_per_token", pa.int64()),  # bf16, layers with a window
        pa.field("sliding_window", pa.int64()),
        pa.field("attention_heads", pa.int32()),
        pa.field("kv_heads", pa.int32()),
        pa.field("lora_parameters", pa.int64()),
        pa.field("sizing_s", pa.float64()),  # the meta build's time (where it was built)
        pa.field("hardware", pa.string()),  # trn2, h100-80gb, ...
        pa.field("primary_hardware", pa.bool_()),  # the run device's main hardware type
        pa.field("core_memory_bytes", pa.int64()),
        pa.field("cores_per_chip", pa.int32()),
        pa.field("cores_per_instance", pa.int32()),
        pa.field("serve_context", pa.int64()),
        pa.field("serve_batch", pa.int32()),
        pa.field("serve_bytes", pa.int64()),
        pa.field("finetune_bytes", pa.int64()),
        pa.field("lora_bytes", pa.int64()),
        pa.field("serve_cores", pa.int32()),  # null: no degree up to the largest domain fits
        pa.field("finetune_cores", pa.int32()),
        pa.field("lora_cores", pa.int32()),
        pa.field("note", pa.string()),  # why a count is null, how KV heads are replicated
    ]
)

# Where and how a run (model sweep or op sweep) was made: the tail of both runs tables.
_PROVENANCE_FIELDS = [
    pa.field("ray_version", pa.string()),
    pa.field("device_package_version", pa.string()),
    pa.field("project_version", pa.string()),
    pa.field("git_sha", pa.string()),
    pa.field("python_version", pa.string()),
    pa.field("hostname", pa.string()),
    pa.field("command", pa.string()),
]
PROVENANCE_FIELDS = tuple(f.name for f in _PROVENANCE_FIELDS)
# The model sweep's library versions (its runs table has them before the provenance).
LIBRARY_VERSION_FIELDS = ("torch_version", "transformers_version", "diffusers_version")
# The versions a model run records: shown on a model's page, compared by a diff (the
# provenance less where the run was made: its host and command).
VERSION_FIELDS = LIBRARY_VERSION_FIELDS + tuple(
    n for n in PROVENANCE_FIELDS if n not in ("hostname", "command")
)

# The first columns of both sweeps' run tables (runs, op_runs): the run's lifecycle and its device.
RUN_HEAD_FIELDS = (
    pa.field("run_id", pa.string(), nullable=False),
    # running | finished | interrupted (stopped early) | incomplete (what the environment kept
    # from running has no rows yet: the same command runs it)
    pa.field("status", pa.string(), nullable=False),
    pa.field("started_at", pa.timestamp("us", tz="UTC")),
    pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("device", pa.string()),
    pa.field("device_emulated", pa.bool_()),
    pa.field("device_profile", pa.string()),
    pa.field("device_profile_hash", pa.string()),
    # the torch the device's profile was written for (an emulated device's: the snapshot's
    # pyproject), and the torch the row ran on: where they differ, a verdict about a name
    # newer than the profile is unverified (CompileEvidence.NEWER_THAN_PROFILE)
    pa.field("device_profile_torch", pa.string()),
    pa.field("device_torch", pa.string()),
)

RUNS_SCHEMA = pa.schema(
    [
        *RUN_HEAD_FIELDS,
        # the run's dtypes, comma-separated in the order asked (`run_dtypes`); a run row written
        # before a run could sweep several dtypes holds one
        pa.field("dtype", pa.string()),
        pa.field("stages", pa.string()),  # comma-separated Stage values
        pa.field("world_size", pa.int32()),  # ranks of the distributed stages (null: none asked)
        pa.field("strict", pa.bool_()),  # a CPU fallback is an error
        pa.field("compile_backend", pa.string()),  # torch.compile backend the compile stage used
        pa.field("compile_mode", pa.string()),  # what an unlowerable graph op does: raise / eager
        pa.field("timeout_s", pa.float64()),  # per model
        pa.field("memory_limit_bytes", pa.int64()),  # per model (0: no cap)
        pa.field("catalog", pa.string()),  # "bundled:<name>" or a path / "hub"
        pa.field("catalog_hash", pa.string()),  # of the catalog file: a resume must match it
        pa.field("catalog_size", pa.int64()),  # models in the catalog
        pa.field("models_requested", pa.int64()),  # models this run was asked for
        # the nightly series the run belongs to (`hfsweep nightly --series`, default the
        # device's name); null for a run that `hfsweep run` started. The previous night of a
        # series is its newest earlier finished run.
        pa.field("nightly", pa.string()),
        # what the run reused (`--reuse`: latest, a run id, all; null: nothing)
        pa.field("reuse", pa.string()),
        # which implementation switches a failing model was run again with (auto / all /
        # none: runners/alternatives.py); null in runs written before the column existed
        pa.field("alternatives", pa.string()),
        *(pa.field(name, pa.string()) for name in LIBRARY_VERSION_FIELDS),
        *_PROVENANCE_FIELDS,
    ]
)

# The op-level sweep (`hfsweep ops`): PyTorch's OpInfo samples on the device against the CPU.
# `ops`: one row per OpInfo x dtype x sample x phase (forward / backward); `dispatched` lists the
# ATen ops the sample dispatched on the device and how each ran. A phase that does not apply to a
# whole OpInfo x dtype (a dtype the op lacks, no autograd) is one row with `sample_index` null.
OP_DISPATCH_TYPE = pa.struct(
    [
        pa.field("op", pa.string()),  # "aten::name.overload" as dispatched
        pa.field("execution", pa.string()),  # OpExecution
        pa.field("fallbacks", pa.list_(pa.string())),  # overloads that fell back while it ran
        pa.field("calls", pa.int32()),
        pa.field("native_lowering", pa.bool_()),  # the device declares a kernel (null: unknown)
    ]
)

OPS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("opinfo", pa.string(), nullable=False),  # OpInfo name[.variant_test_name]
        pa.field("opinfo_name", pa.string(), nullable=False),
        pa.field("variant", pa.string()),
        pa.field("dtype", pa.string(), nullable=False),  # fp32 | bf16 | fp16
        pa.field("sample_index", pa.int32()),
        pa.field("sample", pa.string()),  # a short description: shapes and arguments
        pa.field("phase", pa.string(), nullable=False),  # forward | backward
        pa.field("status", pa.string(), nullable=False),  # OpStatus
        pa.field("reason", pa.string()),  # OpSkipReason for status=skip
        pa.field("detail", pa.string()),  # the skip's or the mismatch's explanation
        pa.field("error_type", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("error_signature", pa.string()),
        pa.field("failing_op", pa.string()),
        pa.field("max_abs_error", pa.float64()),
        pa.field("max_rel_error", pa.float64()),
        pa.field("atol", pa.float64()),
        pa.field("rtol", pa.float64()),
        pa.field("expected_failure", pa.bool_()),  # PyTorch marks this comparison xfail
        pa.field("no_native_lowering", pa.bool_()),  # some dispatched op has no native kernel
        pa.field("dispatched", pa.list_(OP_DISPATCH_TYPE)),
        pa.field("fallback_op_count", pa.int32()),
        pa.field("device", pa.string(), nullable=False),
        pa.field("device_emulated", pa.bool_(), nullable=False),
        pa.field("device_profile", pa.string()),
        pa.field("device_profile_hash", pa.string()),
        # the torch the device's profile was written for (an emulated device's: the snapshot's
        # pyproject), and the torch the row ran on: where they differ, a verdict about a name
        # newer than the profile is unverified (CompileEvidence.NEWER_THAN_PROFILE)
        pa.field("device_profile_torch", pa.string()),
        pa.field("device_torch", pa.string()),
        pa.field("duration_s", pa.float64()),
        pa.field("worker", pa.string()),
        pa.field("finished_at", pa.timestamp("us", tz="UTC")),
    ]
)

# One row per ATen op (base name, `aten::add` for add.Tensor / add_.Tensor / add.out) x dtype,
# written at the end of each op-sweep run; the same numbers `reports/op_sweep.py` computes.
OP_SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("dtype", pa.string(), nullable=False),
        pa.field("samples", pa.int64(), nullable=False),  # sample phases that dispatched it
        pa.field("passed", pa.int64()),
        pa.field("native", pa.int64()),  # passed with this op running natively
        pa.field("fallback", pa.int64()),  # this op fell back (whatever the sample's result)
        pa.field("failed", pa.int64()),  # the sample failed at this op (or timed out, crashed)
        pa.field("wrong", pa.int64()),
        pa.field("skipped", pa.int64()),  # device skips of samples that dispatch it on the CPU
        pa.field("pass_rate", pa.float64()),  # passed / (samples - skipped)
        pa.field("native_lowering", pa.bool_()),
        pa.field("overloads", pa.list_(pa.string())),
        pa.field("fallback_overloads", pa.list_(pa.string())),
        pa.field("opinfos", pa.list_(pa.string())),
        pa.field("device", pa.string(), nullable=False),
        pa.field("device_emulated", pa.bool_(), nullable=False),
    ]
)

OP_RUNS_SCHEMA = pa.schema(
    [
        *RUN_HEAD_FIELDS,
        pa.field("strict", pa.bool_()),  # a CPU fallback is an error
        pa.field("dtypes", pa.string()),  # comma-separated
        pa.field("inputs", pa.string()),  # sample | reference (OpInfo's sample_inputs or more)
        pa.field("timeout_s", pa.float64()),  # per sample
        pa.field("memory_limit_bytes", pa.int64()),  # per child (0: no cap)
        pa.field("declarations_hash", pa.string()),  # of the --skips file ("none": no file)
        pa.field("opinfos_requested", pa.int64()),
        pa.field("opinfo_filter", pa.string()),  # the --ops list, or null for all of op_db
        pa.field("torch_version", pa.string()),
        pa.field("expecttest_version", pa.string()),
        *_PROVENANCE_FIELDS,
    ]
)

TABLES: dict[str, pa.Schema] = {
    "results": RESULTS_SCHEMA,
    "fallbacks": FALLBACKS_SCHEMA,
    "alternatives": ALTERNATIVES_SCHEMA,
    "configs": CONFIGS_SCHEMA,
    "plans": PLANS_SCHEMA,
    "sizing": SIZING_SCHEMA,
    "runs": RUNS_SCHEMA,
    "ops": OPS_SCHEMA,
    "op_summary": OP_SUMMARY_SCHEMA,
    "op_runs": OP_RUNS_SCHEMA,
}


# Free text and JSON: nothing filters on them, and Parquet's min/max statistics of long strings
# would sit in every part file's footer (measured: a third of a small configs part).
FREE_TEXT_COLUMNS = frozenset(
    {
        "error_message",
        "error_signature",
        "shrink_changes",
        "shrunk_config",
        "command",
        "worker",
        "task_key",
        "plan_key",
        "plan",
    }
)


def statistics_columns(table: str) -> list[str]:
    """The columns whose Parquet statistics are written (what filters are pushed down on)."""
    return [n for n in TABLES[table].names if n not in FREE_TEXT_COLUMNS]


def to_table(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Build a pyarrow table for `table` from row dicts, checking columns against the schema.

    Missing keys become nulls; unknown keys raise, so a typo never silently drops a field.
    """
    schema = TABLES[table]
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise KeyError(f"unknown column(s) for table {table!r}: {sorted(extra)}")
    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    return pa.Table.from_pydict(columns, schema=schema)
