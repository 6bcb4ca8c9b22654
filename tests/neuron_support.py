"""Test support for the emulated neuron device: run a test body in a fresh child process.

The autograd engine sizes its device thread pool once per process, at the first backward pass:
- if the neuron backend is installed by then, it starts a neuron device thread, after which no
  child forked from that process can run autograd ("Unable to handle autograd's threading in
  combination with fork-based multiprocessing"), and the runner forks per model;
- if it is not, no backward on `neuron` can ever run in that process (an internal assert).
A pytest process runs CPU backward passes in other tests and forks runner children, so it must
never install the backend, and neuron tests cannot run in a plain fork of it either. `@forked`
runs the test in a child of a `forkserver` (a clean process that imported torch and
transformers once): fast, and independent of what the pytest process did. Device fixtures
passed to the test are set up in the child. The child runs single-threaded (tiny models).
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import multiprocessing as mp
import os
import traceback
from collections.abc import Callable
from typing import Any

import pytest

TIMEOUT_S = int(os.environ.get("NEURON_TEST_TIMEOUT_S", "600"))
PRELOAD = [
    "torch",
    "torch._dynamo",
    "transformers",
    "runners.devices.neuron.emulated",
    # what most forked tests import next: the engine, the builder and the tiny models' classes
    "runners.stages.engine",
    "model_configs.build",
    "transformers.models.llama.modeling_llama",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bert.modeling_bert",
    # and what a first compile imports (Dynamo's backends, the compile stack)
    "tests.forked_compile_warm",
]
_ORIGINALS: dict[tuple[str, str], Callable[..., Any]] = {}


def _context() -> Any:
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _run_child(key: tuple[str, str], args: tuple, kwargs: dict, send: Any) -> None:
    faulthandler.dump_traceback_later(TIMEOUT_S - 10, exit=True)  # a hang shows where
    try:
        import torch

        from runners.devices.base import Device

        torch.set_num_threads(1)
        importlib.import_module(key[0])  # registers the undecorated test in _ORIGINALS
        for value in [*args, *kwargs.values()]:
            if isinstance(value, Device):
                value.setup()
        _ORIGINALS[key](*args, **kwargs)
        send.send(None)
    except BaseException as exc:
        send.send("".join(traceback.format_exception(exc)))
    finally:
        send.close()
        os._exit(0)


def forked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run the decorated test (fixtures resolved here, pickled to the child) in a fresh child;
    its failure, with the child's traceback, fails the test here."""
    key = (fn.__module__, fn.__qualname__)
    _ORIGINALS[key] = fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        context = _context()
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_run_child, args=(key, args, kwargs, send))
        process.start()
        send.close()
        if receive.poll(TIMEOUT_S):
            try:
                failure = receive.recv()
            except EOFError:
                failure = "the test's child process died without a result"
        else:
            process.kill()
            failure = f"the test's child process did not finish in {TIMEOUT_S} s"
        process.join()
        if failure:
            pytest.fail(failure, pytrace=False)

    return wrapper


def tiny_model(kind: str, **overrides: Any) -> Any:
    """A tiny Llama / GPT-2 / BERT (hidden 32, 2 layers) in eval mode, weights from seed 0;
    `overrides` go to its config. Shared by the neuron tests and bench/device_overhead.py."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        BertConfig,
        GPT2Config,
        LlamaConfig,
    )

    torch.manual_seed(0)
    if kind == "llama":
        config = LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128,
            max_position_embeddings=64,
            **overrides,
        )
        return AutoModelForCausalLM.from_config(config).eval()
    if kind == "gpt2":
        config = GPT2Config(
            n_embd=32,
            n_layer=2,
            n_head=4,
            vocab_size=128,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
            **overrides,
        )
        return AutoModelForCausalLM.from_config(config).eval()
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=64,
        **overrides,
    )
    return AutoModelForMaskedLM.from_config(config).eval()
