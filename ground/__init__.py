"""The ground floor every other package stands on: what is a contract rather than a reading.
The row schemas and their enums (`schema.py`, `sizing_columns.py`), the error types and the
environment's faults (`errors.py`), model ids (`ids.py`), environment settings (`settings.py`),
the failure classes and their next steps (`next_steps.py`, with its table in `data/`), and the
formatting helpers that everything prints with (`fmt.py`). It imports no other folder."""
