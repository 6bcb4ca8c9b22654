"""runners.numerics: nested outputs and gradients against a CPU reference, tolerance by dtype."""

from __future__ import annotations

import math

import torch

from runners.numerics import (
    NumericsResult,
    compare_gradients,
    compare_tensors,
    named_tensors,
    tolerance,
)


def test_tolerance_by_dtype() -> None:
    assert tolerance(torch.float32).atol < tolerance(torch.float16).atol
    assert tolerance(torch.float16).atol <= tolerance(torch.bfloat16).atol
    assert tolerance(None) == tolerance(torch.float32)


def test_walks_model_outputs_dicts_and_tuples() -> None:
    from transformers.modeling_outputs import CausalLMOutputWithPast

    logits = torch.randn(2, 3)
    out = CausalLMOutputWithPast(loss=torch.tensor(1.0), logits=logits, hidden_states=(logits,))
    names = [name for name, _ in named_tensors(out)]
    assert names == ["loss", "logits", "hidden_states.0"]
    same = compare_tensors(
        out,
        CausalLMOutputWithPast(
            loss=torch.tensor(1.0), logits=logits.clone(), hidden_states=(logits.clone(),)
        ),
    )
    assert same.ok and same.compared == 3 and same.max_abs_error == 0.0


def test_reports_worst_error_and_fails_beyond_tolerance() -> None:
    ref = {"a": torch.zeros(4), "b": torch.ones(3)}
    close = {"a": torch.full((4,), 5e-5), "b": torch.ones(3)}
    result = compare_tensors(ref, close, torch.float32)
    assert result.ok
    assert math.isclose(result.max_abs_error, 5e-5, rel_tol=1e-3) and result.worst_name == "a"
    far = {"a": torch.zeros(4), "b": torch.tensor([1.0, 1.5, 1.0])}
    result = compare_tensors(ref, far, torch.float32)
    assert not result.ok and result.worst_name == "b" and result.mismatched == ["b"]
    assert math.isclose(result.max_abs_error, 0.5)
    assert "b" in result.message
    assert compare_tensors(ref, far, torch.bfloat16).ok is False
    assert compare_tensors(
        {"x": torch.tensor([1.0])}, {"x": torch.tensor([1.04])}, torch.bfloat16
    ).ok


def test_nan_shape_and_missing_leaves() -> None:
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_tensors(nan, nan.clone()).ok
    one_sided = compare_tensors(torch.tensor([0.0, 1.0]), nan)
    assert not one_sided.ok and one_sided.max_abs_error == math.inf
    assert not compare_tensors(torch.zeros(2), torch.zeros(3)).ok
    missing = compare_tensors({"a": torch.zeros(1), "b": torch.zeros(1)}, {"a": torch.zeros(1)})
    assert not missing.ok and missing.worst_name == "b"
    ints = compare_tensors(torch.tensor([1, 2]), torch.tensor([1, 3]))
    assert not ints.ok


def test_compare_gradients_and_merge() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    act = torch.nn.Linear(3, 2)
    act.load_state_dict(ref.state_dict())
    x = torch.randn(4, 3)
    ref(x).sum().backward()
    act(x).sum().backward()
    assert compare_gradients(ref, act).ok
    act.weight.grad += 1.0
    bad = compare_gradients(ref, act)
    assert not bad.ok and bad.worst_name == "grad.weight"
    merged = NumericsResult(compared=2).merge(bad)
    assert not merged.ok and merged.compared == 4 and merged.worst_name == "grad.weight"


def test_complex_outputs_compare_both_parts() -> None:
    z = torch.tensor([1 + 2j, 3 - 1j])
    assert compare_tensors(z, z.clone()).ok
    imaginary_off = torch.tensor([1 + 2.5j, 3 - 1j])
    result = compare_tensors(z, imaginary_off)
    assert not result.ok and math.isclose(result.max_abs_error, 0.5)
    assert not compare_tensors(z, z.real).ok  # complex against real: a mismatch


def test_accumulation_noise_is_judged_against_the_tensors_scale() -> None:
    """A gradient of magnitude ~700 whose small elements moved by 5e-4 (float32 sums taken in
    another order) is within tolerance; the same error on a tensor of scale 1 is not."""
    ref = torch.tensor([727.0, -512.0, 0.5, 1e-3])
    noisy = ref + torch.tensor([0.0, 0.0, 4.6e-4, 4.6e-4])
    assert compare_tensors(ref, noisy, torch.float32).ok
    small = torch.tensor([1.0, 0.5, 1e-3])
    assert not compare_tensors(small, small + torch.tensor([0.0, 0.0, 4.6e-4]), torch.float32).ok
