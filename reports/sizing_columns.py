"""What each model's summary row (`model_runs`) holds of its full-size config's sizing: its
parameters and, on the run device's primary hardware type, the cores it needs (the sizing
table joined by `config_hash`). A leaf under `reports.query` and `reports.sizing`."""

from __future__ import annotations

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


def with_sizing(summary_sql: str) -> str:
    """The summary query with each model's sizing joined by its config (`sizing_parts`)."""
    return (
        f"WITH base AS ({summary_sql}), sz AS ({_SIZING_SQL})\n"
        "SELECT base.*, sz.* EXCLUDE (config_hash) FROM base LEFT JOIN sz USING (config_hash)"
    )
