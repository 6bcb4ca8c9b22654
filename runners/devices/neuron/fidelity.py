"""Fidelity audit of the emulated neuron device: what it did with every op it dispatched, against
what the profile's data says of that op, op for op.

For each op a stage dispatched the audit checks three things, each of which can fail:
- the class the device applied (native, view, routed to CPU, conditional, fallback) is the one
  `DeviceProfile.classify` gives from the data files;
- what happened at run time agrees with that class: an op the data calls native or a view never
  shows in the fallback log (unless its kernel declined the call: a conditional op, a complex
  tensor), and an op the data calls a fallback or routed to the CPU never ran natively;
- the dispatcher routes it as a real backend with the same registrations would: a registered
  op reaches a kernel of its own, an op with no registration reaches the boxed CPU fallback
  (`torch._C._dispatch_dump_table`).

    with device.record_fallbacks() as log:
        model(**inputs) ...
    result = audit_log(log, device)          # OpAudit per op, and the mismatches
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from runners.devices.base import FallbackLog
from runners.devices.neuron.profiles import DeviceProfile, OpClass, overload_name

# Ops the boxed fallback serves as native (no kernel of their own on any backend: views, and
# the driver's moves and allocations), and the convolution route of devices without a kernel.
_SERVED_BY_FALLBACK = frozenset(
    {"aten::_to_copy", "aten::copy_", "aten::lift_fresh_copy", "aten::record_stream"}
)
_CONVOLUTION = frozenset({"aten::convolution", "aten::convolution_backward"})


@dataclass
class OpAudit:
    op: str
    data_class: str  # what the profile's data says
    device_class: str | None  # what the device applied
    native_calls: int
    fallback_calls: int
    declined: str | None = None  # why a native kernel declined (conditional op, complex input)
    routing: str | None = None  # the dispatcher's entry: kernel / fallback


@dataclass
class AuditResult:
    ops: list[OpAudit] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # stages that raised (audited up to it)

    def counts(self) -> Counter[str]:
        return Counter(a.data_class for a in self.ops)

    def merge(self, other: AuditResult) -> AuditResult:
        return AuditResult(
            self.ops + other.ops,
            self.mismatches + other.mismatches,
            self.failures + other.failures,
        )


def _routing(op: str) -> str | None:
    from runners.devices.neuron.real import dispatch_entry

    return dispatch_entry(op)


def audit_log(log: FallbackLog, device: Any, *, label: str = "") -> AuditResult:
    """Audit one stage's log from the emulated device `device` (its profile decides)."""
    profile: DeviceProfile = device.op_profile
    result = AuditResult()
    prefix = f"{label}: " if label else ""
    for op in sorted(set(log.classes) | set(log.ops) | set(log.executed)):
        data = profile.classify(op)
        seen = log.classes.get(op)
        fallback_calls = log.ops[op].count if op in log.ops else 0
        native_calls = log.executed.get(op, 0)
        declined = log.declined.get(op)
        routing = _routing(op)
        audit = OpAudit(
            op, data.value, seen, native_calls, fallback_calls, declined=declined, routing=routing
        )
        result.ops.append(audit)
        problems = []
        if seen != data.value:
            problems.append(f"applied {seen}, the data says {data.value}")
        native_by_data = data in (OpClass.NATIVE, OpClass.VIEW, OpClass.CONDITIONAL)
        if native_by_data and fallback_calls and not declined:
            problems.append(f"{data.value} by the data, yet {fallback_calls} CPU fallback(s)")
        if data in (OpClass.FALLBACK, OpClass.ROUTED_TO_CPU) and native_calls:
            problems.append(f"{data.value} by the data, yet ran natively {native_calls} time(s)")
        problems += _routing_problems(op, data, routing, profile)
        result.mismatches += [f"{prefix}{op}: {p}" for p in problems]
    return result


def _routing_problems(
    op: str, data: OpClass, routing: str | None, profile: DeviceProfile
) -> list[str]:
    if not profile.exact or routing is None or op in _CONVOLUTION:
        return []
    name = overload_name(op)
    if data in (OpClass.FALLBACK, OpClass.ROUTED_TO_CPU) and routing != "fallback":
        return [f"{data.value} by the data, yet the dispatcher has a kernel for it"]
    registered = data in (OpClass.NATIVE, OpClass.CONDITIONAL)
    if registered and routing != "kernel" and name not in _SERVED_BY_FALLBACK:
        return ["registered by the data, yet the dispatcher sends it to the fallback"]
    return []


# Tiny models of distinct families (transformers defaults for each type, shrunk as a sweep
# shrinks them): text decoders and encoders, encoder-decoders, mixtures of experts, vision,
# audio, state-space and vision-language models.
AUDIT_MODEL_TYPES = (
    "llama",
    "gpt2",
    "bert",
    "t5",
    "bart",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "phi",
    "phi3",
    "falcon",
    "gpt_neox",
    "opt",
    "bloom",
    "roberta",
    "deberta-v2",
    "distilbert",
    "albert",
    "electra",
    "mixtral",
    "qwen3_moe",
    "vit",
    "convnext",
    "resnet",
    "swin",
    "clip",
    "whisper",
    "wav2vec2",
    "mamba",
    "segformer",
    "dinov2",
    "pegasus",
    "granite",
    "olmo2",
)


def audit_model_type(device: Any, model_type: str, *, seed: int = 0) -> AuditResult:
    """Forward (no grad) and a training step of the tiny `model_type`, each stage audited.
    A stage that raises is audited up to the failure (its ops ran)."""
    import torch

    from model_configs import build
    from model_configs.resolve import resolve_entry
    from model_configs.shrink import shrink
    from model_configs.spec import CatalogEntry

    entry = CatalogEntry(
        model_id=f"audit/{model_type}", library="transformers", model_type_hint=model_type
    )
    spec = shrink(resolve_entry(entry, offline=True))
    torch.manual_seed(seed)
    model = build.build_model(spec)
    inputs = build.make_inputs(spec, model, seed=seed, purpose="train")
    model = device.prepare_model(model)
    on_device = device.to_device(inputs)
    result = AuditResult()
    for stage in ("forward", "backward"):
        with device.record_fallbacks() as log:
            try:
                if stage == "forward":
                    with torch.no_grad():
                        model(**on_device)
                else:
                    outputs = model(**on_device)
                    build.compute_loss(spec, model, outputs, on_device).backward()
            except Exception as exc:  # the ops up to the failure are audited all the same
                first = (str(exc).splitlines() or [""])[0][:160]
                result.failures.append(f"{stage}: {type(exc).__name__}: {first}")
        result = result.merge(audit_log(log, device, label=f"{model_type} {stage}"))
    return result
