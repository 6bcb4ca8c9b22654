"""What each model's summary row (`model_runs`) holds of its full-size config's sizing: its
parameters and, on the run device's primary hardware type, the cores it needs (the sizing
table joined by `config_hash`). Part of the contract: `reports.query` and `reports.sizing` read it.

A size is a fact only when it was built from the repo's own config (`config_source` `hub` or
`local`). A model whose config is a library's default for its architecture (offline, every
model) gets `sizing_status` `no_own_config` and no parameters or cores in its summary row, so
no aggregate, filter or column of the models table counts the default's size as the model's;
its page still shows what the default config would need, labelled so (`reports.sizing`)."""

from __future__ import annotations

from ground.schema import ConfigSource

# Config sources that are not the repo's own config: a library's defaults for the architecture
# the catalog names (offline, the bundled catalog holds no config files).
DEFAULT_CONFIG_SOURCES = tuple(
    s.value
    for s in (
        ConfigSource.TRANSFORMERS_DEFAULT,
        ConfigSource.DIFFUSERS_DEFAULT,
        ConfigSource.LIBRARY_DEFAULT,
        ConfigSource.NAME_MAPPED,
    )
)
# The summary row's `sizing_status` of a model sized only from a default config: not a status
# of the sizing table (whose row is `ok`), the reading side's verdict on what that size is.
NO_OWN_CONFIG = "no_own_config"
NO_OWN_CONFIG_TEXT = "not sized: no config of its own"

# What each model's summary row holds of its sizing (primary hardware type).
SUMMARY_SIZING_COLUMNS = (
    "sizing_status VARCHAR, parameters BIGINT, sizing_hardware VARCHAR, serve_cores INTEGER, "
    "finetune_cores INTEGER, lora_cores INTEGER, cores_per_chip INTEGER, "
    "cores_per_instance INTEGER"
)
_SIZING_SQL = """
SELECT config_hash,
  any_value(status) AS sizing_status,
  any_value(parameters) AS parameters,
  any_value(hardware) FILTER (WHERE primary_hardware) AS sizing_hardware,
  any_value(serve_cores) FILTER (WHERE primary_hardware) AS serve_cores,
  any_value(finetune_cores) FILTER (WHERE primary_hardware) AS finetune_cores,
  any_value(lora_cores) FILTER (WHERE primary_hardware) AS lora_cores,
  any_value(cores_per_chip) FILTER (WHERE primary_hardware) AS cores_per_chip,
  any_value(cores_per_instance) FILTER (WHERE primary_hardware) AS cores_per_instance
FROM sizing_parts GROUP BY config_hash
"""


_SIZED_COLUMNS = (
    "parameters",
    "sizing_hardware",
    "serve_cores",
    "finetune_cores",
    "lora_cores",
    "cores_per_chip",
    "cores_per_instance",
)


def with_sizing(summary_sql: str) -> str:
    """The summary query with each model's sizing joined by its config (`sizing_parts`); a
    model without a config of its own gets no figures, and `no_own_config` where the default
    was sized (an error, a refusal or no builder keep their own status)."""
    own = "base.config_source NOT IN ({})".format(
        ", ".join(f"'{s}'" for s in DEFAULT_CONFIG_SOURCES)  # closed enum values, not input
    )
    status = (
        f"CASE WHEN sz.sizing_status = 'ok' AND NOT coalesce({own}, false) "
        f"THEN '{NO_OWN_CONFIG}' ELSE sz.sizing_status END AS sizing_status"
    )
    figures = ", ".join(f"CASE WHEN {own} THEN sz.{c} END AS {c}" for c in _SIZED_COLUMNS)
    return (
        f"WITH base AS ({summary_sql}), sz AS ({_SIZING_SQL})\n"
        f"SELECT base.*, {status}, {figures} FROM base LEFT JOIN sz USING (config_hash)"
    )
