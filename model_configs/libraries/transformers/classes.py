"""Which transformers class builds a config, and what task it does.

Order: the repo's `architectures[0]` hint when it is a transformers class for this config; else
the config's own `architectures`; else the class the pipeline tag asks for (through the auto
mappings); else the first head in TASK_PREFERENCE that the model type has (heads that return a
loss first), else the base model (unless the model's module exports a head the mappings leave
out: the time-series *ForPrediction heads); else another family's class that the auto mappings
name for this model type (exaone runs Llama), built from this config as it is.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ground.errors import ConfigError
from ground.schema import SkipReason

# (mapping name in transformers.models.auto.modeling_auto, task, generative)
TASKS: dict[str, tuple[str, bool]] = {
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES": ("image-text-to-text", True),
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES": ("multimodal-lm", True),
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": ("seq2seq-lm", True),
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES": ("speech-seq2seq", True),
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": ("masked-lm", False),
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": ("causal-lm", True),
    "MODEL_FOR_CTC_MAPPING_NAMES": ("ctc", False),
    "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES": (
        "zero-shot-image-classification",
        False,
    ),
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": ("image-classification", False),
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": ("sequence-classification", False),
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES": ("audio-classification", False),
    "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES": ("video-classification", False),
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": ("token-classification", False),
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": ("question-answering", False),
    "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES": ("multiple-choice", False),
    "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES": ("semantic-segmentation", False),
    "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES": ("depth-estimation", False),
    "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES": ("object-detection", False),
    "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES": ("time-series-prediction", False),
    "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES": ("text-to-audio", False),
    "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES": ("text-to-spectrogram", False),
    "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES": ("audio-frame-classification", False),
    "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES": ("audio-xvector", False),
    "MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES": ("instance-segmentation", False),
    "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES": ("universal-segmentation", False),
    "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES": ("image-segmentation", False),
    "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES": ("zero-shot-object-detection", False),
    "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES": ("keypoint-detection", False),
    "MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES": ("keypoint-matching", False),
    "MODEL_FOR_POSE_ESTIMATION_MAPPING_NAMES": ("pose-estimation", False),
    "MODEL_FOR_IMAGE_MATTING_MAPPING_NAMES": ("image-matting", False),
    "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES": ("mask-generation", False),
    "MODEL_FOR_IMAGE_TO_IMAGE_MAPPING_NAMES": ("image-to-image", False),
    "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES": ("masked-image-modeling", False),
    "MODEL_FOR_CAUSAL_IMAGE_MODELING_MAPPING_NAMES": ("causal-image-modeling", False),
    "MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES": ("document-question-answering", False),
    "MODEL_FOR_VISUAL_QUESTION_ANSWERING_MAPPING_NAMES": ("visual-question-answering", False),
    "MODEL_FOR_TABLE_QUESTION_ANSWERING_MAPPING_NAMES": ("table-question-answering", False),
    "MODEL_FOR_TEXT_RECOGNITION_MAPPING_NAMES": ("text-recognition", False),
    "MODEL_FOR_TABLE_RECOGNITION_MAPPING_NAMES": ("table-recognition", False),
    "MODEL_FOR_NORMAL_ESTIMATION_MAPPING_NAMES": ("normal-estimation", False),
    "MODEL_FOR_POINTMAP_ESTIMATION_MAPPING_NAMES": ("pointmap-estimation", False),
    "MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES": ("time-series-classification", False),
    "MODEL_FOR_TIME_SERIES_REGRESSION_MAPPING_NAMES": ("time-series-regression", False),
    "MODEL_FOR_RNNT_MAPPING_NAMES": ("rnnt", False),
    "MODEL_FOR_TDT_MAPPING_NAMES": ("tdt", False),
    "MODEL_FOR_RETRIEVAL_MAPPING_NAMES": ("retrieval", False),
    "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES": ("text-encoding", False),
    "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES": ("next-sentence-prediction", False),
    "MODEL_FOR_DECISION_MAPPING_NAMES": ("decision", False),
    "MODEL_FOR_PRETRAINING_MAPPING_NAMES": ("pretraining", False),
    "MODEL_MAPPING_NAMES": ("base", False),
    "MODEL_FOR_BACKBONE_MAPPING_NAMES": ("backbone", False),
    "MODEL_FOR_IMAGE_MAPPING_NAMES": ("base", False),
}
TASK_PREFERENCE = list(TASKS)

PIPELINE_TAGS: dict[str, tuple[str, ...]] = {
    "text-generation": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
    "text2text-generation": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "translation": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "summarization": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "fill-mask": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",),
    "text-classification": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",),
    "zero-shot-classification": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",),
    "token-classification": ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",),
    "question-answering": ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",),
    "feature-extraction": ("MODEL_MAPPING_NAMES",),
    "sentence-similarity": ("MODEL_MAPPING_NAMES",),
    "image-feature-extraction": ("MODEL_MAPPING_NAMES",),
    "image-classification": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
    "zero-shot-image-classification": ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
    "image-text-to-text": (
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
        "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    ),
    "any-to-any": (
        "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    ),
    "automatic-speech-recognition": (
        "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
        "MODEL_FOR_CTC_MAPPING_NAMES",
    ),
    "audio-classification": ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",),
    "object-detection": ("MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",),
    "zero-shot-object-detection": ("MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",),
    "keypoint-detection": (
        "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES",
        "MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES",
        "MODEL_FOR_POSE_ESTIMATION_MAPPING_NAMES",
    ),
    "mask-generation": ("MODEL_FOR_MASK_GENERATION_MAPPING_NAMES",),
    "image-segmentation": ("MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",),
    "depth-estimation": ("MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",),
    "video-classification": ("MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",),
    "text-to-audio": ("MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",),
    "text-to-speech": (
        "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
        "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES",
    ),
    "time-series-forecasting": ("MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES",),
}


def _mapping(name: str) -> dict[str, Any]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name, {}) or {}


def _names(value: Any) -> list[str]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@cache
def class_index() -> dict[str, tuple[str, str, bool]]:
    """class name -> (model_type, task, generative), from the auto mappings."""
    out: dict[str, tuple[str, str, bool]] = {}
    for mapping_name in reversed(TASK_PREFERENCE):  # preferred tasks overwrite
        task, generative = TASKS[mapping_name]
        for mt, value in _mapping(mapping_name).items():
            for cls_name in _names(value):
                out[cls_name] = (mt, task, generative)
    return out


def classes_for(model_type: str) -> list[tuple[str, str, bool]]:
    """(class name, task, generative) for a model type, preferred first."""
    out: list[tuple[str, str, bool]] = []
    for mapping_name in TASK_PREFERENCE:
        task, generative = TASKS[mapping_name]
        value = _mapping(mapping_name).get(model_type)
        if value:
            for cls_name in _names(value):
                if all(c != cls_name for c, _, _ in out):
                    out.append((cls_name, task, generative))
    return out


def model_types_with_class() -> list[str]:
    """Model types that have a model class of their own in the auto mappings."""
    types: set[str] = set()
    for mapping_name in TASKS:
        types.update(_mapping(mapping_name))
    from transformers import CONFIG_MAPPING

    return sorted(t for t in types if t in CONFIG_MAPPING)


def _task_of(cls_name: str) -> tuple[str, bool]:
    if cls_name in class_index():
        _, task, gen = class_index()[cls_name]
        return task, gen
    for suffix, task, gen in (
        ("ForCausalLM", "causal-lm", True),
        ("ForConditionalGeneration", "seq2seq-lm", True),
        ("LMHeadModel", "causal-lm", True),
        ("ForMaskedLM", "masked-lm", False),
        ("ForSequenceClassification", "sequence-classification", False),
        ("ForTokenClassification", "token-classification", False),
        ("ForQuestionAnswering", "question-answering", False),
        ("ForImageClassification", "image-classification", False),
        ("ForCTC", "ctc", False),
        ("ForAudioClassification", "audio-classification", False),
    ):
        if cls_name.endswith(suffix):
            return task, gen
    return "base", False


def _compatible(cls_name: str, config: Any) -> bool:
    import transformers

    try:
        cls = getattr(transformers, cls_name)
    except (AttributeError, ImportError, RuntimeError):
        return False
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        return False
    if isinstance(config, config_class):
        return True
    # Classes built from the text sub-config (from_config swaps it in).
    try:
        text = config.get_text_config(decoder=True)
    except Exception:
        return False
    return text is not config and isinstance(text, config_class)


def builds_as_is(cls_name: str, config: Any) -> bool:
    """The auto mappings name `cls_name` for this config's model type although the class is
    another family's (exaone and internlm3 run Llama, sarvam_mla DeepseekV3, glmga Glm46V):
    transformers' auto classes then build it from this config as it is, not from a part."""
    import transformers

    if all(c != cls_name for c, _, _ in classes_for(getattr(config, "model_type", "") or "")):
        return False
    config_class = getattr(getattr(transformers, cls_name, None), "config_class", None)
    subs = (getattr(type(config), "sub_configs", {}) or {}).values()
    return config_class is not None and all(sub is not config_class for sub in subs)


# Heads that the auto mappings leave out although users train them (the forecasting heads of
# Autoformer, Informer and TimeSeriesTransformer: the mappings name only their base models).
UNMAPPED_HEADS = (("ForPrediction", "time-series-prediction", False),)


def _unmapped_head(model_type: str, config: Any) -> tuple[str, str, bool] | None:
    """A head class exported by the model type's own module but missing from the mappings."""
    import importlib

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    try:
        module = importlib.import_module(
            f"transformers.models.{model_type_to_module_name(model_type)}"
        )
    except ImportError:
        return None
    for suffix, task, generative in UNMAPPED_HEADS:
        for name in getattr(module, "__all__", None) or []:
            if name.endswith(suffix) and _compatible(name, config):
                return name, task, generative
    return None


def _has_forward(cls_name: str) -> bool:
    import torch
    import transformers

    cls = getattr(transformers, cls_name, None)
    return cls is not None and getattr(cls, "forward", None) is not torch.nn.Module.forward


def part_config(config: Any, config_class: Any) -> Any:
    """The sub-config (one level down) that `config_class` builds, or None."""
    for key in getattr(type(config), "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is not None and isinstance(sub, config_class):
            return sub
    return None


def _part_with_forward(config: Any) -> tuple[str, str, bool] | None:
    """A wrapper with no forward of its own (Qwen2.5-Omni runs its thinker, then its talker,
    only through generate): users train and run forward on a part; the first part whose
    preferred class has a forward, in the config's sub-config order."""
    for key in getattr(type(config), "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        mt = getattr(sub, "model_type", None)
        if not mt:
            continue
        for cls_name, task, generative in classes_for(mt):
            if _compatible(cls_name, sub) and _has_forward(cls_name):
                return cls_name, task, generative
    return None


def choose_class(
    config: Any,
    *,
    architecture_hint: str | None = None,
    pipeline_tag: str | None = None,
    model_id: str | None = None,
) -> tuple[str, str, bool]:
    """(class name, task, generative) for a transformers config object."""
    chosen = _choose_own(config, architecture_hint, pipeline_tag, model_id)
    if not _has_forward(chosen[0]):
        return _part_with_forward(config) or chosen
    return chosen


def _choose_own(
    config: Any, architecture_hint: str | None, pipeline_tag: str | None, model_id: str | None
) -> tuple[str, str, bool]:
    mt = config.model_type
    candidates: list[str] = []
    if architecture_hint:
        candidates.append(architecture_hint)
    candidates.extend(a for a in (getattr(config, "architectures", None) or []) if a)
    for name in candidates:
        if _compatible(name, config):
            return (name, *_task_of(name))
    own = [c for c in classes_for(mt) if _compatible(c[0], config)]
    if pipeline_tag in PIPELINE_TAGS:
        for mapping_name in PIPELINE_TAGS[pipeline_tag]:
            value = _mapping(mapping_name).get(mt)
            for cls_name in _names(value) if value else []:
                if _compatible(cls_name, config):
                    return (cls_name, *_task_of(cls_name))
    if own and own[0][1] == "base":
        head = _unmapped_head(mt, config)
        if head is not None:
            return head
    if own:
        return own[0]
    aliased = [c for c in classes_for(mt) if builds_as_is(c[0], config)]
    if aliased:
        return aliased[0]
    raise ConfigError(
        f"no transformers class builds model_type {mt!r}",
        reason=SkipReason.NO_MODEL_CLASS.value,
        model_id=model_id,
    )
