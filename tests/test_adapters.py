"""The library adapters: one registry keyed by the Hub's library_name, and each adapter on real
configs of sampled architectures (shrunk, built, saved and loaded the library's way, fed,
trained once, and held to the pass rule)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from ground.errors import ConfigError, UnknownNameError
from model_configs.libraries import ADAPTERS, adapter_names, get_adapter, library_for
from model_configs.pass_rule import MAX_PARAMS, failure
from model_configs.spec import CatalogEntry, ResolvedConfig
from runners.settings import ModelSettings
from tests.conftest import ROOT
from tests.neuron_support import forked


def train_once(library: str, resolved: ResolvedConfig, **shrink_kw) -> dict:
    """Shrink, build, save + load, feed, one backward: what the load..backward stages do."""
    import torch

    from model_configs.grad_coverage import grad_coverage, watch_grad_mode

    adapter = get_adapter(library)
    spec = adapter.shrink(resolved, **shrink_kw)
    assert spec.library == library
    torch.manual_seed(0)
    model = adapter.build_model(spec)
    with tempfile.TemporaryDirectory() as tmp:
        model = adapter.save_and_load(spec, model, Path(tmp))
    inputs = adapter.make_inputs(spec, model)
    with watch_grad_mode(model) as watch:
        outputs = model(**inputs)
    loss = adapter.compute_loss(spec, model, outputs, inputs)
    loss.backward()
    params = sum(p.numel() for p in model.parameters())
    share = grad_coverage(model, watch).share
    why = failure(params=params, grad_share=share, loss=float(loss.detach()))
    assert why is None, f"{resolved.model_id}: {why}"
    return {"spec": spec, "model": model, "params": params, "inputs": inputs}


def entry(model_id: str, library: str | None, **kw) -> CatalogEntry:
    return CatalogEntry(model_id=model_id, library=library, **kw)


# ----- the registry -----


def test_registry_is_keyed_by_the_hub_library_name():
    assert set(adapter_names()) == set(ADAPTERS)
    for name in adapter_names():
        assert get_adapter(name).library == name
    with pytest.raises(UnknownNameError, match="Did you mean 'timm'"):
        get_adapter("tim")


def test_untagged_entries():
    bolt = entry("autogluon/chronos-bolt-small", None, model_type_hint="t5",
                 pipeline_tag="time-series-forecasting", tags=("t5", "time series"))  # fmt: skip
    assert library_for(bolt) == "chronos-forecasting"
    assert library_for(entry("org/m", None, model_type_hint="llama")) == "transformers"
    assert library_for(entry("org/m", None)) is None
    assert library_for(entry("org/m", "gguf")) is None


def test_a_missing_package_is_a_skip_naming_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a)
    )
    with pytest.raises(ConfigError) as info:
        get_adapter("timm").require_package("timm/resnet50.a1_in1k")
    assert info.value.reason == "missing_package"
    assert "timm" in info.value.message and "install.sh all,timm" in (info.value.hint or "")
    # what the row's message keeps: the locked route, not a pip install that bypasses the lock
    assert "bash scripts/install.sh all,timm" in info.value.message


def test_ultralytics_names_its_licence(monkeypatch):
    adapter = get_adapter("ultralytics")
    monkeypatch.setattr(type(adapter), "missing_packages", lambda self: ["ultralytics"])
    with pytest.raises(ConfigError, match="AGPL-3.0"):
        adapter.require_package("Bingsu/adetailer")


# ----- timm -----

TIMM_SAMPLE = [
    "resnet50", "vit_small_patch16_224", "efficientnet_b0", "convnext_tiny",
    "mobilenetv3_small_100", "swin_tiny_patch4_window7_224", "maxvit_tiny_tf_224",
    "cspresnet50", "vitamin_small_224",
    "vgg11",  # the pre-logits ConvMlp narrowed by its mlp_ratio
    "hgnet_tiny", "selecsls42",  # stages described by position
    "dla46x_c", "resnest50d",  # grouped bottlenecks keep their width when the groups shrink
    "resnetv2_50x1_bit",  # GroupNorm of 32 groups inside the bottleneck
    "halonet26t",  # halo attention blocks that tile the tiny feature map
    "hardcorenas_f",  # EfficientNet-style block strings
    "resnest50d_4s2x40d",  # split attention: radix x cardinality groups
    "resnet50_gn", "regnetz_b16_evos",  # GroupNorm / EvoNorm group sizes
    "resnet50_clip", "repvgg_b1",  # an attention-pool head; widths written as floats
    "repghostnet_200",  # a whole-float width multiplier (width=2.0), not a width
]  # fmt: skip


@pytest.mark.parametrize("arch", TIMM_SAMPLE)
def test_timm_architectures_shrink_by_their_constructor(arch):
    resolved = get_adapter("timm").default_config(entry(f"timm/{arch}.some_tag", "timm"))
    assert resolved.source == "library_default" and resolved.config == {"architecture": arch}
    run = train_once("timm", resolved)
    assert run["spec"].changes, "the shrink changed nothing"
    assert run["params"] <= MAX_PARAMS


def test_timm_positional_stages_and_grouped_bottlenecks_shrink_by_role():
    from model_configs.libraries.timm import shrink as tshrink

    shrinker = tshrink.Shrinker(4.0, "SelecSls")
    features = [(32, 0, 64, 64, True, 2), (64, 64, 64, 128, False, 1)]
    # the first input width is the fixed stem's; every other width shrinks by one function
    assert shrinker.positional("iwww__", features) == [(32, 0, 16, 16, True, 2),
                                                       (16, 16, 16, 32, False, 1)]  # fmt: skip
    hgnet = tshrink.Shrinker(4.0, "HighPerfGpuNet")
    out = hgnet.value("model_cfg", {"stage2": [224, 128, 448, 3, True, False, 3, 5]}, "")
    assert out["stage2"] == [64, 32, 112, 1, True, False, 3, 2]
    args = {"cardinality": 32, "base_width": 4}
    tshrink.fit_groups(args)  # the bottleneck keeps planes * base_width / 64 * cardinality
    assert args == {"cardinality": 4, "base_width": 32}
    assert tshrink.Shrinker(8.0, "VGG").args({"mlp_ratio": 1.0})["mlp_ratio"] == 1 / 64
    arch_def = [["ds_r1_k3_s1_e1_c16"], ["ir_r2_k5_s2_e3_c64_se0.25", "ir_r1_k5_s1_e3_c64"]]
    assert tshrink.Shrinker(4.0).arch_def(arch_def) == [["ds_r1_k3_s1_e1_c16"],
                                                        ["ir_r1_k5_s2_e3_c16_se0.25"]]  # fmt: skip
    resnest = tshrink.Shrinker(8.0, "ResNet").args(
        {"channels": (64, 128, 256, 512), "base_width": 40, "cardinality": 2,
         "block_args": {"radix": 4}}
    )  # fmt: skip
    assert all(int(p * resnest["base_width"] / 64) % 4 == 0 for p in resnest["channels"])
    assert tshrink.Shrinker(4.0, "RepGhostNet").args({"width": 2.0})["width"] == 0.25
    assert tshrink.Shrinker(4.0, "RepVGG").args({"c": 128.0})["c"] == 32.0
    gn = tshrink.Shrinker(8.0, "ResNet").args({"channels": (64, 128), "norm_layer": "groupnorm"})
    assert all(c % 32 == 0 for c in gn["channels"])


def test_timm_config_json_and_unknown_architectures(tmp_path):
    adapter = get_adapter("timm")
    (tmp_path / "config.json").write_text(
        json.dumps({"architecture": "resnet18", "num_classes": 0, "pretrained_cfg": {}})
    )
    resolved = adapter.from_files("org/feat", tmp_path, "hub")
    run = train_once("timm", resolved)
    assert run["spec"].task == "image-feature-extraction"
    with pytest.raises(ConfigError) as info:
        adapter.default_config(entry("prov-gigapath/prov-gigapath", "timm"))
    assert info.value.reason == "no_config"


def test_timm_build_checks_the_spec_it_was_shrunk_to():
    from dataclasses import replace

    from ground.errors import ShrinkError

    adapter = get_adapter("timm")
    spec = adapter.shrink(adapter.default_config(entry("timm/resnet18.a1_in1k", "timm")))
    tampered = replace(spec, config={**spec.config, "args": {"layers": [9, 9, 9, 9]}})
    with pytest.raises(ShrinkError, match="differently"):
        adapter.build_model(tampered)


# ----- open_clip -----


@pytest.mark.parametrize(
    ("repo", "name", "cls"),
    [
        ("laion/CLIP-ViT-B-32-laion2B-s34B-b79K", "ViT-B-32", "CLIP"),
        ("laion/CLIP-convnext_base_w-laion2B-s13B-b82K-augreg", "convnext_base_w", "CLIP"),
        ("timm/ViT-B-16-SigLIP-i18n-256", "ViT-B-16-SigLIP-i18n-256", "CustomTextCLIP"),
        ("openai/RN50", "RN50", "CLIP"),
    ],
)
def test_open_clip_shrinks_both_towers(repo, name, cls):
    resolved = get_adapter("open_clip").default_config(entry(repo, "open_clip"))
    assert resolved.config["model_name"] == name
    run = train_once("open_clip", resolved)
    assert run["spec"].architecture == cls
    assert any(k.startswith("vision_cfg") for k in run["spec"].changes)
    assert any(k.startswith("text_cfg") for k in run["spec"].changes)


def test_open_clip_hf_text_towers_need_the_hub():
    adapter = get_adapter("open_clip")
    resolved = adapter.default_config(entry("org/xlm-roberta-base-ViT-B-32-x", "open_clip"))
    with pytest.raises(ConfigError) as info:
        adapter.shrink(resolved)
    assert info.value.reason == "no_config" and "xlm-roberta-base" in info.value.message


# ----- chronos -----


@pytest.mark.parametrize(
    ("repo", "arch"),
    [
        ("amazon/chronos-t5-small", "T5ForConditionalGeneration"),
        ("amazon/chronos-bolt-base", "ChronosBoltModelForForecasting"),
        ("amazon/chronos-2", "Chronos2Model"),
    ],
)
def test_chronos_kinds(repo, arch):
    resolved = get_adapter("chronos-forecasting").default_config(entry(repo, "chronos-forecasting"))
    run = train_once("chronos-forecasting", resolved)
    assert run["spec"].architecture == arch
    if arch == "T5ForConditionalGeneration":  # token ids from Chronos' own mean-scaling bins
        ids = run["inputs"]["input_ids"]
        assert int(ids.max()) < run["spec"].config["chronos_config"]["n_tokens"]
        assert run["spec"].generative


# ----- sentence-transformers -----


def test_sentence_transformers_default_stack():
    resolved = get_adapter("sentence-transformers").default_config(
        entry(
            "sentence-transformers/all-MiniLM-L6-v2",
            "sentence-transformers",
            model_type_hint="bert",
        )  # fmt: skip
    )
    assert [m["type"] for m in resolved.config["modules"]] == ["Transformer", "Pooling",
                                                               "Normalize"]  # fmt: skip
    run = train_once("sentence-transformers", resolved)
    out = run["model"](**run["inputs"])
    emb = out["sentence_embedding"]
    assert emb.shape[0] == 4
    assert abs(float(emb.norm(dim=-1).mean()) - 1.0) < 1e-4  # the Normalize module ran


def _st_repo(tmp_path: Path, dense: bool = True, module: str = "Dense") -> Path:
    """A sentence-transformers repo's config files (all-MiniLM-L6-v2's layout, plus a head)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]  # fmt: skip
    if dense:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": f"sentence_transformers.models.{module}"}
        )  # fmt: skip
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256}))
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6,
        "num_attention_heads": 12, "intermediate_size": 1536, "vocab_size": 30522,
    }))  # fmt: skip
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 384, "pooling_mode_cls_token": True,
        "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
    }))  # fmt: skip
    (tmp_path / "2_Dense").mkdir()
    (tmp_path / "2_Dense" / "config.json").write_text(json.dumps({
        "in_features": 384, "out_features": 768, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh",
    }))  # fmt: skip
    return tmp_path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{oops", "not valid JSON"),
        ("[" * 100 + "]" * 100, "nests deeper"),
        ("{}", "list of modules"),
    ],
)
def test_sentence_transformers_modules_json_is_bounded_like_a_config(tmp_path, text, needle):
    """modules.json is read as every config file is (size, nesting, JSON), then must be a list."""
    _st_repo(tmp_path)
    (tmp_path / "modules.json").write_text(text)
    with pytest.raises(ConfigError, match=needle) as info:
        get_adapter("sentence-transformers").from_files("org/st", tmp_path, "hub")
    assert info.value.reason == "malformed_config"


def test_sentence_transformers_modules_json_with_a_dense_head(tmp_path):
    adapter = get_adapter("sentence-transformers")
    resolved = adapter.from_files("org/st", _st_repo(tmp_path), "hub")
    run = train_once("sentence-transformers", resolved)
    kinds = [type(m).__name__ for m in run["model"]]
    assert kinds == ["Transformer", "Pooling", "Dense"]
    assert run["model"](**run["inputs"])["sentence_embedding"].shape[-1] == 32


def test_sentence_transformers_refuses_module_types_outside_the_library(tmp_path):
    adapter = get_adapter("sentence-transformers")
    resolved = adapter.from_files("org/st", _st_repo(tmp_path, module="MyCustomHead"), "hub")
    with pytest.raises(ConfigError) as info:
        adapter.shrink(resolved)
    assert info.value.reason == "no_model_class"


# ----- ultralytics -----


@pytest.mark.parametrize(
    ("yaml", "cls"),
    [
        ("yolov8", "DetectionModel"),
        ("yolo11-seg", "SegmentationModel"),
        ("yolo11-pose", "PoseModel"),
        ("yolov8-obb", "OBBModel"),
        ("yolo11-cls", "ClassificationModel"),
        ("yolo26-sem", "SemanticSegmentationModel"),
        ("yolo26-depth", "DepthModel"),
        ("rtdetr-resnet50", "RTDETRDetectionModel"),  # its loss on the eval-mode outputs
        ("yolov9e", "DetectionModel"),  # written channel counts scaled with the widths
        ("yolov8-cls-resnet50", "ClassificationModel"),
        ("yolov8-worldv2", "WorldModel"),  # text embeddings as an input
        ("yoloe-11-seg", "YOLOESegModel"),
    ],
)
def test_ultralytics_tasks_train_with_their_own_loss(yaml, cls):
    adapter = get_adapter("ultralytics")
    resolved = next(r for r in adapter.iter_architectures() if r.model_id == f"ultralytics/{yaml}")
    run = train_once("ultralytics", resolved)
    assert run["spec"].architecture == cls


FIRST_BUILDS = [  # (library, the model id's end): each library's first look-up in the process
    ("transformers", "vit"),
    ("diffusers", "UNet2DConditionModel"),
    ("ultralytics", "ultralytics/yolov8"),
]


def test_first_builds_in_a_fresh_process_leave_no_import_time_tensor_on_meta():
    """The build budget builds on `meta` first. A lazy package imports a class's module when the
    class is first looked up: that budget's meta build must not be that first look-up
    (diffusers' `FLUX_MAG_RATIOS` and `E2M1_LUT`, torchaudio's kaldi `EPSILON` through
    transformers were made on `meta`). A worker that never imported ultralytics (its plan ran in
    another worker) imported it inside that meta context, so the heads' class-level tensors
    (`Detect.anchors`, `.strides`) were made on `meta`, and every later `.to(device)` of a YOLO
    model failed ("Cannot copy out of meta tensor"): Bingsu/adetailer in a sweep.

    One fresh interpreter builds each library's model in turn, each library not yet imported
    when its build starts (checked), then looks for a tensor on `meta` in every module."""
    specs = []
    for library, model_id in FIRST_BUILDS:
        adapter = get_adapter(library)
        resolved = next(r for r in adapter.iter_architectures() if r.model_id.endswith(model_id))
        specs.append(adapter.shrink(resolved))  # planning imports the library: here, not there
    script = textwrap.dedent(
        """
        import inspect, pickle, sys
        import torch
        from model_configs import build
        specs = pickle.loads(sys.stdin.buffer.read())
        for spec in specs:
            imported = [m for m in sys.modules if m.split(".")[0] == spec.library]
            assert not imported, (spec.library, imported[:5])
            model = build.build_model(spec)  # the budget's build on meta, then the real one
            if spec.library == "ultralytics":
                from ultralytics.nn.modules.head import Detect
                assert Detect.anchors.device.type == "cpu", Detect.anchors.device
                model.to("cpu")
        on_meta = []
        for name, module in list(sys.modules.items()):
            for key, value in list(vars(module).items()):
                values = vars(value).items() if inspect.isclass(value) else [(key, value)]
                for attr, tensor in list(values):
                    if isinstance(tensor, torch.Tensor) and tensor.device.type == "meta":
                        on_meta.append(f"{name}.{key}.{attr}")
        assert not on_meta, on_meta
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(specs), capture_output=True,
        timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_ultralytics_scales_the_channel_counts_a_yaml_writes():
    """YOLOv9-E's CBLinear splits must equal the widths of the layers CBFuse adds them to; the
    ResNet classifier's layers chain (each takes the previous one's 4x expanded output)."""
    adapter = get_adapter("ultralytics")
    by_name = {r.model_id.split("/")[-1]: r for r in adapter.iter_architectures()}
    layers = adapter.shrink(by_name["yolov9e"]).config["backbone"]
    assert layers[14][2] == "CBLinear" and layers[14][3][0] == [8, 16, 32, 64, 128]
    assert layers[3][3][1:3] == [16, 8]  # RepNCSPELAN4 [256, 128, 64]: hidden widths / 8
    resnet = adapter.shrink(by_name["yolov8-cls-resnet50"]).config["backbone"]
    assert [layer[3][:2] for layer in resnet] == [[3, 8], [8, 8], [32, 16], [64, 32], [128, 64]]
    spec = adapter.shrink(by_name["yolov9c"])
    assert any(k.endswith("RepNCSPELAN4") for k in spec.changes)


def test_ultralytics_open_vocabulary_models_take_text_embeddings_as_inputs():
    adapter = get_adapter("ultralytics")
    resolved = next(r for r in adapter.iter_architectures() if r.model_id.endswith("/yoloe-11"))
    run = train_once("ultralytics", resolved)
    assert run["inputs"]["tpe"].shape == (2, 4, 512)  # batch, classes, MobileCLIP's width


def test_ultralytics_catalog_repo_maps_to_its_yaml():
    resolved = get_adapter("ultralytics").default_config(entry("Bingsu/adetailer", "ultralytics"))
    assert resolved.config["yaml_file"] == "yolov8n.yaml" and "YOLOv8" in resolved.detail


# ----- pyannote-audio, speechbrain -----


@pytest.mark.parametrize(
    "repo",
    ["pyannote/segmentation-3.0", "pyannote/wespeaker-voxceleb-resnet34-LM",
     "pyannote/speaker-diarization-3.1"],
)  # fmt: skip
def test_pyannote_models_and_pipelines(repo):
    resolved = get_adapter("pyannote-audio").default_config(entry(repo, "pyannote-audio"))
    run = train_once("pyannote-audio", resolved)
    if repo.endswith("3.1"):  # the pipeline's two models, both fed
        out = run["model"](**run["inputs"])
        assert set(out) == {"segmentation", "embedding"}


@forked
def test_importing_speechbrain_changes_no_global_torch_setting():
    """In a process whose cuDNN flags torch's test utilities froze (as the op sweep's OpInfo
    database does), speechbrain imports, and TF32 and the JIT's profiling are as they were: a
    process forked from the warm one (`run_code`) that has not imported speechbrain, without the
    `SB_DISABLE_QUIRKS` an earlier import may have set."""
    from tests.warm_fork import run_code

    code = """
        import sys
        import torch
        assert not any(m.split(".")[0] == "speechbrain" for m in sys.modules)
        import torch.testing._internal.common_utils  # freezes the backends' flags
        before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                  torch._C._jit_set_profiling_executor(True))
        from model_configs.libraries.speechbrain.adapter import import_speechbrain
        import_speechbrain()
        after = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                 torch._C._jit_set_profiling_executor(True))
        assert before == after, (before, after)
        print("ok")
        """
    proc = run_code(code, env={"SB_DISABLE_QUIRKS": None})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize(
    "repo",
    ["speechbrain/spkrec-ecapa-voxceleb", "speechbrain/lang-id-voxlingua107-ecapa",
     "speechbrain/spkrec-xvect-voxceleb", "speechbrain/vad-crdnn-libriparty"],
)  # fmt: skip
def test_speechbrain_interfaces(repo):
    resolved = get_adapter("speechbrain").default_config(entry(repo, "speechbrain"))
    train_once("speechbrain", resolved)


def test_pyannote_sseriouss_builds_its_encoder_from_a_config_dict_never_a_download():
    adapter = get_adapter("pyannote-audio")
    resolved = next(r for r in adapter.iter_architectures() if r.model_id.endswith("SSeRiouSS"))
    assert resolved.config["models"]["model"]["args"]["wav2vec"] == "WAVLM_BASE"
    run = train_once("pyannote-audio", resolved)
    wav2vec = run["spec"].config["models"]["model"]["args"]["wav2vec"]
    assert isinstance(wav2vec, dict) and wav2vec["encoder_embed_dim"] == 32
    assert len(wav2vec["extractor_conv_layer_config"]) == 7  # WavLM's seven conv layers


@pytest.mark.slow
def test_speechbrain_contextnet_keeps_both_widths_and_its_downsamplings():
    adapter = get_adapter("speechbrain")
    resolved = next(r for r in adapter.iter_architectures() if r.model_id.endswith("ContextNet"))
    args = train_once("speechbrain", resolved)["spec"].config["args"]
    assert args["num_blocks"] == 4 and args["strides"].count(2) == 3
    assert len(set(args["conv_channels"])) == 2


@pytest.mark.parametrize("name", ["ESPnetVGG", "GatedNN"])
def test_speechbrain_asr_encoders_train_on_fbank_features(name):
    adapter = get_adapter("speechbrain")
    resolved = next(r for r in adapter.iter_architectures() if r.model_id.endswith(f"/{name}"))
    run = train_once("speechbrain", resolved)
    args = run["spec"].config["args"]
    assert args["input_shape"] == [None, None, run["spec"].config["n_mels"]]
    assert run["spec"].task == "asr-encoder"


@pytest.mark.parametrize("encoder", ["", "-conformer", "-branchformer"])
def test_speechbrain_transformer_asr_trains_its_decoder_on_a_transcript(encoder):
    adapter = get_adapter("speechbrain")
    name = f"speechbrain/TransformerASR{encoder}"
    resolved = next(r for r in adapter.iter_architectures() if r.model_id == name)
    run = train_once("speechbrain", resolved)
    args = run["spec"].config["args"]
    assert args["num_encoder_layers"] == args["num_decoder_layers"] == 2
    assert args["d_model"] % args["nhead"] == 0 and args["input_size"] == 24
    logits = run["model"](**run["inputs"])
    assert logits.shape == (*run["inputs"]["tokens"].shape, args["tgt_vocab"])


def test_speechbrain_never_reads_hyperparams_and_says_why():
    adapter = get_adapter("speechbrain")
    assert adapter.config_files == ()
    with pytest.raises(ConfigError) as info:
        adapter.default_config(entry("speechbrain/emotion-recognition-wav2vec2-IEMOCAP",
                                     "speechbrain"))  # fmt: skip
    assert info.value.reason == "no_config" and "downloads" in info.value.message


# ----- diffusion-single-file -----


@pytest.mark.parametrize(
    ("repo", "cls"),
    [
        ("Comfy-Org/Wan_2.1_ComfyUI_repackaged", "WanTransformer3DModel"),
        ("Comfy-Org/flux1-dev", "FluxTransformer2DModel"),
        ("Comfy-Org/z_image_turbo", "ZImageTransformer2DModel"),
    ],
)
def test_single_files_map_by_name_where_diffusers_loads_them(repo, cls):
    resolved = get_adapter("diffusion-single-file").default_config(
        entry(repo, "diffusion-single-file")
    )
    assert resolved.source == "name_mapped" and "mapped by name" in resolved.detail
    run = train_once("diffusion-single-file", resolved)
    assert run["spec"].architecture == cls


def test_single_files_diffusers_cannot_load_stay_a_skip():
    adapter = get_adapter("diffusion-single-file")
    with pytest.raises(ConfigError) as info:
        adapter.default_config(entry("Comfy-Org/HunyuanVideo_1.5_repackaged", "x"))
    assert info.value.reason == "unsupported_library"
    assert "cannot load this architecture's single files" in info.value.message


# ----- through the sweep's own path -----


def test_the_load_stage_saves_and_loads_through_the_adapter():
    from model_configs.catalog import load_catalog
    from runners.run_model import run_model
    from sweep.plan import plan_entry

    found = load_catalog("bundled").get("timm/resnet18.a1_in1k")
    planned = plan_entry(found, [])
    assert planned.spec is not None and planned.spec.library == "timm"
    outcome = run_model(
        planned.spec, ModelSettings(device="cpu", stages=["load", "forward", "backward"])
    )
    assert [r.status for r in outcome.stages] == ["pass", "pass", "pass"], outcome.stages
