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
    """Stages a model goes through, in order. A failure makes every later stage `not_run`."""

    LOAD = "load"
    FORWARD = "forward"
    BACKWARD = "backward"
    COMPILE = "compile"
    GENERATE = "generate"

    def __str__(self) -> str:
        return self.value


STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)


class Status(str, enum.Enum):
    """Closed status vocabulary for one (model, stage)."""

    PASS = "pass"
    FAIL = "fail"
    FAIL_ACCURACY = "fail_accuracy"
    TIMEOUT = "timeout"
    CRASH = "crash"  # the worker process died
    OOM = "oom"
    SKIP = "skip"  # with a SkipReason
    NOT_RUN = "not_run"  # an earlier stage did not pass

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
    NOT_FOUND = "not_found"  # the repo does not exist (or is private)
    GATED = "gated"  # the repo needs an accepted licence to read
    DEVICE_UNSUPPORTED_FEATURE = "device_unsupported_feature"  # e.g. a dtype the device lacks
    NOT_APPLICABLE = "not_applicable"  # the stage does not apply (generate on an encoder)

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


class FallbackSource(str, enum.Enum):
    """Where a CPU fallback was seen: eager dispatch, or a compiled graph's unlowerable op."""

    EAGER = "eager"
    COMPILE = "compile"

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------------------------------------
# Tables. Column order is the order below; every column is nullable unless marked otherwise.

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
        pa.field("config_hash", pa.string()),
        pa.field("shrunk_config_hash", pa.string()),
        pa.field("param_count", pa.int64()),
        pa.field("device", pa.string(), nullable=False),
        pa.field("device_emulated", pa.bool_(), nullable=False),
        pa.field("device_profile", pa.string()),
        pa.field("device_profile_hash", pa.string()),
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
        pa.field("peak_memory_bytes", pa.int64()),
        pa.field("compile_mode", pa.string()),  # the neuron compiler's: raise / eager / partition
        pa.field("recompile_count", pa.int32()),  # compile stage: frames compiled again
        pa.field("dedup_of", pa.string()),  # the model whose task produced this result, if shared
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
        pa.field("downloads", pa.int64()),  # copied from the model row, for ranking ops
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

RUNS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        # running | finished | interrupted (stopped early) | incomplete (models the environment
        # kept from running have no rows yet: the same command runs them)
        pa.field("status", pa.string(), nullable=False),
        pa.field("started_at", pa.timestamp("us", tz="UTC")),
        pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("device", pa.string()),
        pa.field("device_emulated", pa.bool_()),
        pa.field("device_profile", pa.string()),
        pa.field("device_profile_hash", pa.string()),
        pa.field("dtype", pa.string()),
        pa.field("stages", pa.string()),  # comma-separated Stage values
        pa.field("strict", pa.bool_()),  # a CPU fallback is an error
        pa.field("compile_backend", pa.string()),  # torch.compile backend the compile stage used
        pa.field("compile_mode", pa.string()),  # neuron: an unlowerable graph op raises / eager
        pa.field("timeout_s", pa.float64()),  # per model
        pa.field("memory_limit_bytes", pa.int64()),  # per model (0: no cap)
        pa.field("catalog", pa.string()),  # "bundled:<name>" or a path / "hub"
        pa.field("catalog_hash", pa.string()),  # of the catalog file: a resume must match it
        pa.field("catalog_size", pa.int64()),  # models in the catalog
        pa.field("models_requested", pa.int64()),  # models this run was asked for
        pa.field("torch_version", pa.string()),
        pa.field("transformers_version", pa.string()),
        pa.field("diffusers_version", pa.string()),
        pa.field("ray_version", pa.string()),
        pa.field("device_package_version", pa.string()),
        pa.field("project_version", pa.string()),
        pa.field("git_sha", pa.string()),
        pa.field("python_version", pa.string()),
        pa.field("hostname", pa.string()),
        pa.field("command", pa.string()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "results": RESULTS_SCHEMA,
    "fallbacks": FALLBACKS_SCHEMA,
    "configs": CONFIGS_SCHEMA,
    "runs": RUNS_SCHEMA,
}


# Free text and JSON: nothing filters on them, and Parquet's min/max statistics of long strings
# would sit in every part file's footer (measured: a third of a small configs part).
FREE_TEXT_COLUMNS = frozenset(
    {"error_message", "error_signature", "shrink_changes", "shrunk_config", "command", "worker"}
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
