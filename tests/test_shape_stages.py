"""The shape stages (docs/stages-shapes.md): `shapes` (graphs and recompiles at new input
shapes, a verdict) and `generate_compiled` (greedy generation with a static KV cache and the
compiled forward); the emulated neuron compiler's static-shape rule (TorchNeuron's
DynamicShapeAnalysis); input variants; data-dependent graph breaks named."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ground.schema import Stage
from model_configs.input_shapes import larger_batch, longer_sequence, sequence_length
from reports.shapes import shape_advice, shape_detail
from runners import stages as stage_registry
from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.run_model import run_model
from runners.settings import ModelSettings
from runners.stages.shapes.compiled import data_dependent_op
from sweep.commands.options import stage_list
from tests.neuron_support import forked
from tests.test_runner import tiny


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test (tests/neuron_support.py)


def by_stage(outcome) -> dict:
    return {r.stage: r for r in outcome.stages}


def one_layer_llama():
    """The tiny Llama with one decoder layer: what a compile costs here is Dynamo tracing the
    forward once per shape (symbolically for automatic dynamic shapes), in proportion to the
    layers; one layer shows the same graphs, recompiles and reasons as two."""
    spec = tiny("llama", "LlamaForCausalLM")
    return dataclasses.replace(spec, config={**spec.config, "num_hidden_layers": 1})


def test_the_shape_stages_are_asked_for_by_name_and_bring_their_needs():
    assert stage_list("shapes") == [
        Stage.LOAD, Stage.FORWARD, Stage.COMPILE, Stage.GENERATE, Stage.SHAPES,
        Stage.GENERATE_COMPILED,
    ]  # fmt: skip
    assert stage_list("shapes,generate_compiled") == stage_list("shapes")
    assert stage_list("generate_compiled") == [
        Stage.LOAD, Stage.FORWARD, Stage.GENERATE, Stage.GENERATE_COMPILED
    ]  # fmt: skip
    assert not set(stage_registry.group_stages("shapes")) & set(
        stage_list(None)
    )  # not in the default stages
    assert stage_registry.stage_needs()[Stage.SHAPES] == (Stage.LOAD, Stage.FORWARD, Stage.COMPILE)


def test_input_variants_grow_the_sequence_and_the_batch():
    ids = torch.arange(12).reshape(2, 6)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(2, 6), "labels": ids.clone()}
    assert sequence_length(inputs) == 6
    longer = longer_sequence(inputs, 3)
    assert longer["input_ids"].shape == (2, 18) and longer["attention_mask"].shape == (2, 18)
    bigger = larger_batch(inputs, 2)
    assert bigger["labels"].shape == (4, 6)
    image = {"pixel_values": torch.zeros(2, 3, 8, 8)}
    assert (
        longer_sequence(image, 2) is None and larger_batch(image, 2)["pixel_values"].shape[0] == 4
    )


def test_a_data_dependent_graph_break_names_its_op():
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    def f(x):
        return x.nonzero().sum() + x.sum()

    dynamo.reset()
    counters.clear()
    torch.compile(f, backend="eager", dynamic=False)(torch.randn(4, 8))
    reasons = [str(r) for r in counters["graph_break"]]
    dynamo.reset()
    assert data_dependent_op(reasons) == "aten::nonzero.default"
    item = "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert data_dependent_op([item, *reasons]) == "aten::nonzero.default"  # the op named
    assert data_dependent_op([item]) == ""
    assert data_dependent_op(["Data-dependent branching", "graph_break()"]) is None
    row = {"stage": "shapes", "status": "pass", "shape_verdict": "data_dependent",
           "failing_op": "aten::nonzero.default", "recompile_count": 2, "graph_count": 4}  # fmt: skip
    assert shape_advice(row) == "data-dependent shapes at aten::nonzero.default: cannot be compiled"
    assert "2 recompiles" in shape_detail(row)


def test_shapes_on_the_cpu_with_automatic_dynamic_shapes_reuse_a_graph():
    """aot_eager is not the CPU's own backend: torch.compile's default `dynamic` (automatic
    dynamic shapes) applies, so the third sequence length reuses the symbolic graph. The
    compile stage before it is left out (the engine runs a stage whose needs were not asked
    for; a training step through Dynamo costs seconds): the neuron test runs shapes after it."""
    outcome = run_model(
        one_layer_llama(),
        ModelSettings(
            device="cpu", stages=["load", "forward", "shapes"], compile_backend="aot_eager"
        ),
    )
    row = by_stage(outcome)["shapes"]
    assert row.status == "pass", row.error_message
    assert row.shape_verdict == "dynamic"
    assert row.recompile_count == 2  # the sequence, then the batch, became symbolic
    assert any("size mismatch" in r for r in row.recompile_reasons)


@forked
def test_the_shape_stages_on_neuron(neuron: NeuronEmulatedDevice) -> None:
    """`--stages shapes` as a user asks for it (compile, generate and generate_compiled with
    it), in one model process: `shapes` is static, one graph per shape; generate_compiled
    matches eager with no recompile."""
    outcome = run_model(one_layer_llama(), ModelSettings(device="neuron",
                        stages=stage_list("shapes")), device=neuron)  # fmt: skip
    rows = by_stage(outcome)
    assert rows["compile"].status == "pass", rows["compile"].error_message
    row = rows["shapes"]
    assert row.status == "pass", row.error_message
    assert row.shape_verdict == "static"
    assert row.recompile_count == 3  # x2 and x3 the sequence, x2 the batch
    assert row.graph_count == 4
    assert any("expected 16, actual 32" in r for r in row.recompile_reasons)
    assert row.compile_evidence is not None  # the neuron compiler's verdicts were recorded
    row = rows["generate_compiled"]
    assert row.status == "pass", row.error_message
    assert row.recompile_count == 0 and row.graph_count >= 1
    # greedy decoding's argmax runs outside the compiled forward: it still falls back
    assert any(f["op"].startswith("aten::argmax") for f in row.fallbacks)


@forked
def test_the_compile_rule_rejects_symbolic_shapes(neuron: NeuronEmulatedDevice) -> None:
    """TorchNeuron's DynamicShapeAnalysis: a symbolic dimension raises its RuntimeError."""
    model = neuron.prepare_model(torch.nn.Linear(8, 8))
    x = torch.randn(3, 8).to("neuron")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception) as info:
        torch.compile(model, backend="neuron", dynamic=False)(x)
    cause = getattr(info.value, "inner_exception", None) or info.value
    assert isinstance(cause, RuntimeError)
    assert "Dynamic shapes detected in the model, but torch-neuronx requires static shapes" in (
        str(cause)
    )
    torch._dynamo.reset()
    y = torch.randn(3, 8).to("neuron")  # the same model, static: compiles
    torch.compile(model, backend="neuron", dynamic=False)(y)


def test_generate_compiled_does_not_apply_to_an_encoder():
    outcome = run_model(
        tiny("bert", "BertForMaskedLM"),
        ModelSettings(device="cpu", stages=["load", "forward", "generate", "generate_compiled"]),
    )
    row = by_stage(outcome)["generate_compiled"]
    assert row.status == "skip" and row.reason == "not_applicable"
