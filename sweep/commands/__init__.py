"""One module per `hfsweep` sub-command: `add_arguments(parser)` and `run(args) -> int`."""
