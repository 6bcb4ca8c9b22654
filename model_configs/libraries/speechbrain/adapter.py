"""speechbrain: the lobes models its inference interfaces run, with their feature front end.

SpeechBrain 1.x runs here: it needs torchaudio, and PyPI's torchaudio 2.11 (built on PyTorch's
stable ABI, `torch>=2.11`) loads beside torch 2.14; the models are plain PyTorch modules.
A SpeechBrain repo describes its model in `hyperparams.yaml`, which HyperPyYAML turns into
objects by importing and calling what the file names (`!new:`, `!apply:`, `!name:`): that is
the repo's instructions running, so this adapter never loads it. The architecture comes from
the adapter's table (`data/tables.json`: the repo's classes and
their arguments), built from `speechbrain.lobes` classes only. The model is what the repo's
interface runs: `Fbank` features, `InputNormalization`, the embedding or VAD model, and a
classifier head where the repo has one (language id), fed a waveform batch; the encoder-decoder
ASR models (TransformerASR) are also fed a transcript's tokens and end in SpeechBrain's
`seq_lin` output layer. Loss: the head's
cross-entropy, an in-batch contrastive loss for embeddings and for the ASR encoders'
outputs (ESPnetVGG, GatedNN), BCE for frame-wise VAD, next-token cross-entropy for ASR.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from model_configs.libraries.base import Adapter, find_class, library_tables, no_config
from model_configs.libraries.caps import cap_keys
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from model_configs.tiny_inputs import AUDIO_SAMPLES, BATCH

TOKENS = 8
N_MELS = 24
# Per-class caps: (argument, cap) for ints; lists are capped element-wise.
CAPS: dict[str, dict[str, int]] = {
    "ECAPA_TDNN": {"lin_neurons": 16, "attention_channels": 16, "se_channels": 16},
    "Xvector": {"lin_neurons": 16, "tdnn_blocks": 5},
    "ResNet": {"lin_neurons": 16},
    "CRDNN": {
        "rnn_layers": 1,
        "rnn_neurons": 16,
        "dnn_blocks": 1,
        "dnn_neurons": 16,
        "cnn_blocks": 2,
    },  # fmt: skip
    "Cnn14": {"emb_dim": 32},
    "VanillaNN": {"dnn_blocks": 2, "dnn_neurons": 16},
    "ContextNet": {"out_channels": 32, "num_layers": 2, "inner_dim": 8, "num_blocks": 4},
    "ESPnetVGG": {"rnn_layers": 1, "rnn_neurons": 16, "projection_neurons": 16},
    "GatedNN": {"blocks": 2, "neurons": 16},
    # the encoder-decoder ASR models (transformer, conformer or branchformer encoder); two
    # layers each side, heads dividing d_model
    "TransformerASR": {
        "tgt_vocab": 32,
        "d_model": 16,
        "nhead": 2,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "d_ffn": 32,
        "csgu_linear_units": 32,
    },
    "Classifier": {"lin_neurons": 16, "out_neurons": 8},
}
# Width lists a class takes, and their tiny values (the constraints stated with them).
LISTS: dict[str, dict[str, list[int]]] = {
    # res2net splits channels into res2net_scale (8) groups; the last layer is 3x (MFA)
    "ECAPA_TDNN": {"channels": [32, 32, 32, 32, 96]},
    "Xvector": {"tdnn_channels": [32, 32, 32, 32, 64]},
    "ResNet": {"channels": [8, 8, 16, 16], "block_sizes": [1, 1, 1, 1]},
    "CRDNN": {"cnn_channels": [8, 16]},
    # ContextNet's 21 blocks are 10 of 256 channels then 11 of 512, three of them striding by
    # 2: four blocks keep both widths (scaled by 1/16) and the three downsamplings
    "ContextNet": {"conv_channels": [16, 16, 32, 32], "strides": [1, 2, 2, 2]},
    # the VGG front end's two conv blocks (64, 128 channels), each halving time and frequency
    "ESPnetVGG": {"cnn_channels": [8, 16]},
}
LOBES = "speechbrain.lobes.models"


class SpeechBrainAdapter(Adapter):
    library = "speechbrain"
    package = "speechbrain"
    extra = "audio"
    config_files = ()  # hyperparams.yaml is never read: see the module docstring

    def missing_packages(self) -> list[str]:
        import importlib.util

        return [n for n in ("speechbrain", "torchaudio") if importlib.util.find_spec(n) is None]

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        data = library_tables(__file__)
        mapped = data["repos"].get(entry.model_id)
        if mapped is None:
            raise no_config(
                "SpeechBrain describes models in hyperparams.yaml, which runs what it names, so "
                "it is not read; the adapter's table does not know this repo",
                entry.model_id,
            )
        if mapped.get("skip"):
            raise no_config(mapped["skip"], entry.model_id)
        return self.library_default(
            entry.model_id,
            copy.deepcopy(mapped["model"]),
            detail=f"speechbrain.lobes classes from the adapter's table ({mapped['reason']})",
        )

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        cfg = copy.deepcopy(resolved.config)
        name = str(cfg.get("class"))
        _lobe(name, resolved.model_id)
        defaults = _defaults(name)
        given = dict(cfg.get("args") or {})
        for key in CAPS.get(name, {}):  # sizes the class takes by default are shrunk too
            if key not in given and isinstance(defaults.get(key), int):
                given[key] = defaults[key]
        args, changes = cap_keys(given, CAPS.get(name, {}), prefix="args.")
        for key, value in LISTS.get(name, {}).items():
            if key in args or key in _defaults(name):
                changes[f"args.{key}"] = [args.get(key, _defaults(name).get(key)), value]
                args[key] = list(value)
        changes["n_mels"] = [cfg.get("n_mels"), N_MELS]
        cfg["n_mels"] = N_MELS
        _set_input_size(name, args)
        cfg["args"] = args
        head = cfg.get("classifier")
        if isinstance(head, dict):
            head_args, head_changes = cap_keys(head, CAPS["Classifier"], prefix="classifier.")
            head_args["input_size"] = args.get("lin_neurons", 16)
            cfg["classifier"] = head_args
            changes.update(head_changes)
        return TinySpec(
            library=self.library,
            model_type=name,
            architecture=name,
            config=cfg,
            generative=False,
            task=str(cfg.get("task", "speaker-embedding")),
            changes=changes,
        )

    def build_model(self, spec: TinySpec) -> Any:
        import torch

        torch.manual_seed(0)
        return _interface_class()(spec.config).float().eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        inputs = {"wavs": torch.randn(BATCH, AUDIO_SAMPLES, generator=gen) * 0.1}
        if spec.config.get("task") == "asr":  # the transcript's tokens the decoder is fed
            vocab = int(spec.config["args"]["tgt_vocab"])
            inputs["tokens"] = torch.randint(1, vocab, (BATCH, TOKENS), generator=gen)
        return inputs

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        import torch
        import torch.nn.functional as F

        out = outputs.float()
        task = spec.config.get("task")
        if task == "classification":  # the head's scores per class
            logits = out.reshape(out.shape[0], -1)
            labels = torch.arange(out.shape[0], device=out.device) % logits.shape[-1]
            return F.cross_entropy(logits, labels)  # labels on the device, as a training loop has
        if task == "asr":  # next-token cross-entropy of the decoder's scores
            vocab = out.shape[-1]
            tokens = inputs["tokens"]
            return F.cross_entropy(out[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        if task == "vad":
            probs = torch.sigmoid(out)
            target = torch.zeros_like(probs)
            target[:, : probs.shape[1] // 2] = 1.0
            return F.binary_cross_entropy(probs, target)
        emb = F.normalize(out.reshape(out.shape[0], -1), dim=-1)
        scores = emb @ emb.roll(1, 0).T * 10.0
        return F.cross_entropy(scores, torch.arange(out.shape[0], device=scores.device))

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        for name, model in library_tables(__file__)["architectures"].items():
            yield self.library_default(
                f"speechbrain/{name}",
                copy.deepcopy(model),
            )


def import_speechbrain() -> Any:
    """Import speechbrain without leaving its lazy placeholders in `sys.modules`.

    speechbrain registers not-yet-imported modules (integrations such as k2_fsa, deprecated
    paths) as LazyModule objects in `sys.modules`; any code that later walks `sys.modules` and
    reads an attribute (hypothesis, pickling, op registries) triggers their import, which
    raises ImportError where their optional dependency (k2) is missing. The placeholders that
    were never loaded are dropped: importing such a module by name still works (or fails)
    normally.

    Its global "quirks" are turned off (`SB_DISABLE_QUIRKS`, unless the user set it): on import
    speechbrain would switch on TF32 matmuls, turn off the JIT's profiling and, on ROCm,
    cuDNN benchmarking, for every model of the process, so that a model's numerics would
    depend on whether a speechbrain model was built before it. Setting a cuDNN flag also
    raises where the process imported torch's test utilities (the op sweep's OpInfo
    database), which freeze the flags."""
    import os

    os.environ.setdefault("SB_DISABLE_QUIRKS", ",".join(SPEECHBRAIN_QUIRKS))
    import speechbrain

    drop_lazy_placeholders()
    return speechbrain


# speechbrain.utils.quirks.KNOWN_QUIRKS: each changes a global torch setting on import
SPEECHBRAIN_QUIRKS = ("allow_tf32", "disable_cudnn_benchmarking", "disable_jit_profiling")


def drop_lazy_placeholders() -> None:
    """Every subpackage speechbrain imports registers more placeholders: called after each."""
    import sys

    from speechbrain.utils.importutils import LazyModule  # DeprecatedModuleRedirect is one too

    for name, module in list(sys.modules.items()):
        if isinstance(module, LazyModule) and vars(module).get("lazy_module") is None:
            del sys.modules[name]


def _lobe(name: str, model_id: str | None = None) -> Any:
    """A class of speechbrain.lobes.models (module named after the class, or ECAPA's)."""
    import_speechbrain()
    modules = tuple(
        f"{LOBES}.{m}"
        for m in (
            name,
            "ECAPA_TDNN",
            "ResNet",
            "Xvector",
            "CRDNN",
            "ContextNet",
            "transformer.TransformerASR",
        )
    )
    return find_class(
        name, modules, where=LOBES, model_id=model_id, after_import=drop_lazy_placeholders
    )


def _defaults(name: str) -> dict[str, Any]:
    import inspect

    params = inspect.signature(_lobe(name).__init__).parameters
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


def _set_input_size(name: str, args: dict[str, Any]) -> None:
    """The feature width each class is told (its own argument name for it)."""
    if name in ("ECAPA_TDNN", "ResNet", "TransformerASR"):
        args["input_size"] = N_MELS
    elif name == "Xvector":
        args["in_channels"] = N_MELS
    elif name == "Cnn14":
        args["mel_bins"] = N_MELS
    elif name in ("CRDNN", "VanillaNN", "ContextNet", "ESPnetVGG", "GatedNN"):
        args["input_shape"] = [None, None, N_MELS]


def _interface_class() -> Any:
    import_speechbrain()
    import torch
    from speechbrain.lobes.features import Fbank
    from speechbrain.processing.features import InputNormalization

    drop_lazy_placeholders()

    class SpeechBrainInterface(torch.nn.Module):
        """Fbank -> InputNormalization -> the model [-> classifier], as the repo's interface
        (EncoderClassifier / VAD) runs them on a waveform batch."""

        def __init__(self, config: dict[str, Any]):
            super().__init__()
            self.compute_features = Fbank(n_mels=int(config["n_mels"]))
            self.mean_var_norm = InputNormalization(norm_type="sentence", std_norm=False)
            args = dict(config.get("args") or {})
            if "input_shape" in args:
                args["input_shape"] = [None if x is None else int(x) for x in args["input_shape"]]
            self.model = _lobe(str(config["class"]))(**args)
            head = config.get("classifier")
            if isinstance(head, dict):
                from speechbrain.lobes.models.ECAPA_TDNN import Classifier

                drop_lazy_placeholders()
                self.classifier = Classifier(**head)
            else:
                self.classifier = None
            # the ASR models' decoder output layer (seq_lin in SpeechBrain's recipes)
            self.seq_lin = (
                torch.nn.Linear(int(args["d_model"]), int(args["tgt_vocab"]))
                if config.get("task") == "asr"
                else None
            )
            self.output = (  # the VAD's frame-wise output layer
                torch.nn.Linear(int(args.get("dnn_neurons", 512)), 1)
                if config.get("task") == "vad"
                else None
            )

        def forward(self, wavs: Any, tokens: Any = None) -> Any:
            lengths = torch.ones(wavs.shape[0], device=wavs.device)
            feats = self.mean_var_norm(self.compute_features(wavs), lengths)
            if self.seq_lin is not None:  # encoder-decoder: (encoder_out, decoder_out, ...)
                return self.seq_lin(self.model(feats, tokens, lengths)[1])
            out = self.model(feats)
            if isinstance(out, tuple):
                out = out[0]
            if self.classifier is not None:
                out = self.classifier(out)
            if self.output is not None:
                out = self.output(out.reshape(out.shape[0], out.shape[1], -1))
            return out

    return SpeechBrainInterface
