"""Test support: imported by the `@forked` tests' forkserver (tests/neuron_support.py: PRELOAD),
so that what a first compile imports is imported once per worker, not once per test.

`runners.warm.warm_parent`, as a model process's parent calls it before it forks (imports only:
no device is set up here), for the emulated neuron device with its compile stack: Dynamo's
backends, the neuron compiler, AOTAutograd's and Inductor's modules and the decompositions. Each
`@forked` test that compiles, and each `hfsweep check` a test forks from one
(tests/warm_fork.py: run_cli), started from a process that had imported none of it: a second or
more per test (a check's model child: about 3 CPU s)."""

from __future__ import annotations

from runners.isolation import CHILD_MODULES
from runners.warm import warm_parent

warm_parent(*CHILD_MODULES, device="neuron")
