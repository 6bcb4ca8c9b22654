"""pyannote-audio: segmentation and speaker-embedding models, and the models inside pipelines.

pyannote.audio 4 runs here: it needs torchaudio, and PyPI's torchaudio 2.11 (built on
PyTorch's stable ABI, `torch>=2.11`) loads beside torch 2.14; pyannote's models are plain
PyTorch modules (SincNet, LSTMs, ResNets over kaldi fbanks from torchaudio's pure-PyTorch
`compliance.kaldi`). torchcodec, which pyannote imports for audio files, is never called:
inputs are waveform tensors made here.

A model repo's `config.yaml` names a `model._target_` class with its arguments; the
adapter takes only classes from `pyannote.audio.models` (never a path the repo names
elsewhere). A pipeline repo (speaker diarization, VAD) runs the models its pipeline loads;
they are built side by side and both fed. Offline, catalog repos map to their classes through
`data/tables.json`. A model class builds its output layer from
its task's specifications; the adapter sets those (powerset or multilabel frame
classification for segmentation) and calls `build()`, as pyannote does when it loads a
checkpoint. Loss: cross-entropy over frames (powerset), BCE (multilabel), an in-batch
contrastive loss for embeddings.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from ground.errors import ConfigError, ShrinkError
from ground.schema import SkipReason
from model_configs.libraries.base import Adapter, find_class, library_tables, no_config
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from model_configs.tiny_inputs import AUDIO_SAMPLES, BATCH

# Family rules: the constructor arguments each class shrinks by, and their tiny values.
SHRINK: dict[str, dict[str, Any]] = {
    "PyanNet": {"lstm": {"hidden_size": 16, "num_layers": 2}, "linear": {"hidden_size": 16}},
    "XVectorSincNet": {"dimension": 32},
    "XVectorMFCC": {"dimension": 32},
    "SSeRiouSS": {"lstm": {"hidden_size": 16, "num_layers": 2}, "linear": {"hidden_size": 16}},
}
# WeSpeaker ResNets fix their widths and depth inside the class; the tiny model keeps the class
# and rebuilds its `resnet` trunk through pyannote's own ResNet constructor, narrower and with
# one block per stage (the rows record it).
WESPEAKER = {"num_blocks": [1, 1, 1, 1], "m_channels": 8, "embed_dim": 32, "num_mel_bins": 40}
# SSeRiouSS names its self-supervised front end as a torchaudio pipeline ("WAVLM_BASE"), whose
# constructor downloads the pretrained weights; its other branch, the one pyannote's
# `from_pretrained` takes, builds the encoder from a config dict understood by torchaudio's
# `wav2vec2_model`. The tiny model takes that branch with the pipeline's own layout (its
# `_params`, read without a download), narrower and shallower. `wav2vec2_model` has no
# WavLM gated relative position bias (`encoder_num_buckets`, `encoder_max_distance`): the
# encoder is a wav2vec 2.0 transformer of WavLM's shape, and the row's changes say so.
TINY_WAV2VEC: dict[str, Any] = {"encoder_embed_dim": 32, "encoder_num_layers": 2,
                                "encoder_num_heads": 2, "encoder_ff_interm_features": 64,
                                "encoder_pos_conv_kernel": 16, "encoder_pos_conv_groups": 4,
                                "encoder_layer_drop": 0.0}  # fmt: skip
TINY_EXTRACTOR_WIDTH = 16  # the conv feature extractor's channels (512 in WavLM / wav2vec 2.0)
MODEL_MODULES = ("pyannote.audio.models.segmentation", "pyannote.audio.models.embedding",
                 "pyannote.audio.models.separation")  # fmt: skip


class PyannoteAdapter(Adapter):
    library = "pyannote-audio"
    package = "pyannote.audio"
    extra = "audio"
    config_files = ("config.yaml",)
    hub_files = ("config.yaml",)

    def missing_packages(self) -> list[str]:
        import importlib.util

        names = ["pyannote", "torchaudio"]
        missing = [n for n in names if importlib.util.find_spec(n) is None]
        if not missing and importlib.util.find_spec("pyannote.audio") is None:
            missing = ["pyannote.audio"]
        return missing

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        repos = library_tables(__file__)["repos"]
        mapped = repos.get(entry.model_id)
        if mapped is None:
            raise no_config(
                "no config.yaml available offline, and the adapter's table does not know this "
                "repo's model class",
                entry.model_id,
            )
        models = {
            part: copy.deepcopy(library_tables(__file__)["models"][name])
            for part, name in mapped["models"].items()
        }
        return self.library_default(
            entry.model_id,
            {"models": models},
            detail=f"pyannote.audio classes from the adapter's table ({mapped['reason']})",
        )

    def from_files(self, model_id: str, folder: Any, source: str) -> ResolvedConfig | None:
        path = folder / "config.yaml"
        if not path.is_file():
            return None
        import yaml

        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(
                f"{path}: not readable YAML: {exc}",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=model_id,
            ) from exc
        model = (data or {}).get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or "_target_" not in model:
            raise no_config(
                f"{path}: a pipeline or a config without model._target_; pipelines resolve "
                "offline through the adapter's table only",
                model_id,
            )
        target = str(model.pop("_target_"))
        name = target.rsplit(".", 1)[-1]
        entry = {"class": name, "args": model, "specifications": _default_specs(name)}
        return ResolvedConfig(
            model_id=model_id, library=self.library, config={"models": {"model": entry}},
            source=source, detail=str(path),
        )  # fmt: skip

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        models = resolved.config.get("models")
        if not isinstance(models, dict) or not models:
            raise ConfigError(
                "pyannote config names no model",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=resolved.model_id,
            )
        tiny: dict[str, Any] = {}
        changes: dict[str, list[Any]] = {}
        for part, m in models.items():
            cls_name = str(m["class"])
            _model_class(cls_name, resolved.model_id)  # refuse anything outside pyannote's models
            args = copy.deepcopy(m.get("args") or {})
            if cls_name == "SSeRiouSS":
                before = args.get("wav2vec")
                args["wav2vec"] = _tiny_wav2vec(before, resolved.model_id)
                changes[f"{part}.wav2vec"] = [before, args["wav2vec"]]
            for key, value in SHRINK.get(cls_name, {}).items():
                if isinstance(value, dict):
                    old = dict(args.get(key) or {})
                    args[key] = {**old, **value}
                    changes[f"{part}.{key}"] = [old, args[key]]
                else:
                    changes[f"{part}.{key}"] = [args.get(key), value]
                    args[key] = value
            entry = {"class": cls_name, "args": args, "specifications": m.get("specifications")}
            if cls_name.startswith("WeSpeakerResNet"):
                entry["resnet"] = dict(WESPEAKER)
                changes[f"{part}.resnet"] = ["the class's own ResNet", dict(WESPEAKER)]
                args["num_mel_bins"] = WESPEAKER["num_mel_bins"]
            tiny[part] = entry
        arch = "PipelineModels" if len(tiny) > 1 else str(next(iter(tiny.values()))["class"])
        return TinySpec(
            library=self.library,
            model_type=arch if len(tiny) == 1 else "+".join(m["class"] for m in tiny.values()),
            architecture=arch,
            config={"models": tiny},
            generative=False,
            task="voice-activity-detection" if "segmentation" in tiny else "speaker-embedding",
            changes=changes,
        )

    def build_model(self, spec: TinySpec) -> Any:
        import torch

        torch.manual_seed(0)
        parts = {name: _build_part(m) for name, m in spec.config["models"].items()}
        if len(parts) == 1:
            return next(iter(parts.values())).eval()
        return PipelineModels(parts).eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        return {"waveforms": torch.randn(BATCH, 1, AUDIO_SAMPLES, generator=gen) * 0.1}

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        models = spec.config["models"]
        if len(models) == 1:
            return _part_loss(next(iter(models.values())), outputs)
        return sum(_part_loss(models[name], out) for name, out in outputs.items())

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        """Every model class pyannote.audio offers, with the adapter's default arguments."""
        table = library_tables(__file__)["models"]
        for name, m in table.items():
            yield self.library_default(
                f"pyannote/{name}",
                {"models": {"model": copy.deepcopy(m)}},
            )


def _tiny_wav2vec(wav2vec: Any, model_id: str | None) -> dict[str, Any]:
    """SSeRiouSS's encoder as the config dict its constructor takes (see TINY_WAV2VEC)."""
    import inspect

    import torchaudio

    if isinstance(wav2vec, str) and hasattr(torchaudio.pipelines, wav2vec):
        params = dict(getattr(torchaudio.pipelines, wav2vec)._params)
    elif isinstance(wav2vec, dict):
        params = dict(wav2vec)
    else:  # a checkpoint path: torch.load of a file (weights), never done here
        raise ShrinkError(
            f"SSeRiouSS's wav2vec {wav2vec!r} is neither a torchaudio pipeline nor a config "
            "dict (a checkpoint path: its weights would be loaded)",
            model_id=model_id,
            stage="load",
        )
    takes = inspect.signature(torchaudio.models.wav2vec2_model).parameters
    tiny = {k: v for k, v in params.items() if k in takes}
    layers = tiny.get("extractor_conv_layer_config") or [(512, 10, 5)] + [(512, 3, 2)] * 4
    tiny["extractor_conv_layer_config"] = [
        [TINY_EXTRACTOR_WIDTH, int(kernel), int(stride)] for _, kernel, stride in layers
    ]
    tiny.update(TINY_WAV2VEC)
    return tiny


def _model_class(name: str, model_id: str | None = None) -> Any:
    return find_class(name, MODEL_MODULES, where="pyannote.audio.models", model_id=model_id)


def _default_specs(name: str) -> dict[str, Any] | None:
    for m in library_tables(__file__)["models"].values():
        if m["class"] == name:
            return copy.deepcopy(m.get("specifications"))
    return None


def _specifications(spec: dict[str, Any]) -> Any:
    from pyannote.audio.core.task import Problem, Resolution, Specifications

    return Specifications(
        problem=Problem[spec["problem"]],
        resolution=Resolution[spec["resolution"]],
        duration=float(spec.get("duration", 1.0)),
        classes=list(spec["classes"]),
        powerset_max_classes=spec.get("powerset_max_classes"),
        permutation_invariant=bool(spec.get("permutation_invariant", False)),
    )


def _build_part(m: dict[str, Any]) -> Any:
    cls = _model_class(m["class"])
    args = copy.deepcopy(m["args"])
    if isinstance(args.get("wav2vec"), dict):  # JSON lists back to the (width, k, s) tuples
        conv = args["wav2vec"].get("extractor_conv_layer_config")
        if conv:
            args["wav2vec"]["extractor_conv_layer_config"] = [tuple(c) for c in conv]
    model = cls(**args)
    if "resnet" in m:
        from pyannote.audio.models.embedding.wespeaker.resnet import BasicBlock, ResNet

        r = m["resnet"]
        model.resnet = ResNet(BasicBlock, list(r["num_blocks"]), m_channels=int(r["m_channels"]),
                              feat_dim=int(r["num_mel_bins"]), embed_dim=int(r["embed_dim"]),
                              pooling_func="TSTP", two_emb_layer=False)  # fmt: skip
    if m.get("specifications"):
        model.specifications = _specifications(m["specifications"])
        model.build()
    return model.float()


def _part_loss(m: dict[str, Any], out: Any) -> Any:
    import torch
    import torch.nn.functional as F

    out = out.float()
    spec = m.get("specifications") or {}
    if spec.get("resolution") == "FRAME":
        if spec.get("powerset_max_classes"):
            # log-softmax over powerset classes: targets are frame-wise class ids
            target = torch.arange(out.shape[1], device=out.device) % out.shape[-1]
            return F.nll_loss(out.reshape(-1, out.shape[-1]), target.repeat(out.shape[0]))
        target = torch.zeros_like(out)
        target[..., 0] = 1.0
        return F.binary_cross_entropy(out.clamp(1e-6, 1 - 1e-6), target)
    emb = F.normalize(out.reshape(out.shape[0], -1), dim=-1)
    scores = emb @ emb.roll(1, 0).T * 10.0  # each embedding against the batch
    return F.cross_entropy(scores, torch.arange(out.shape[0], device=out.device))


def _pipeline_models_class() -> Any:
    import torch

    class _PipelineModels(torch.nn.Module):
        """The models a pyannote pipeline loads, each fed the same waveforms."""

        def __init__(self, parts: dict[str, Any]):
            super().__init__()
            self.parts = torch.nn.ModuleDict(parts)

        def forward(self, waveforms: Any) -> dict[str, Any]:
            return {name: part(waveforms) for name, part in self.parts.items()}

    return _PipelineModels


def PipelineModels(parts: dict[str, Any]) -> Any:  # noqa: N802  (a class made lazily)
    return _pipeline_models_class()(parts)
