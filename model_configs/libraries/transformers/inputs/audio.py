"""Input builders for speech, audio codecs and text-to-speech models (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    AUDIO_MARKERS,
    _audio_token_id,
    _count_feature_tokens,
    _splice,
    _token_ids,
    placeholder_run,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH


def _randn(ctx: InputContext, *shape: int) -> Any:
    import torch

    return torch.randn(*shape, generator=ctx.gen)


def _ones(*shape: int) -> Any:
    import torch

    return torch.ones(*shape, dtype=torch.long)


def _audio_prompt(ctx: InputContext, audio: dict[str, Any], per_sample: int | None = None) -> None:
    """A text prompt whose audio placeholders (between the model's audio start/end tokens, when
    it has them) number exactly the audio tower's output positions, plus the audio itself."""
    config = ctx.config
    if per_sample is None:
        total = _count_feature_tokens(ctx.model, config, audio, getter="get_audio_features")
        per_sample = total // BATCH
    audio_id = int(_audio_token_id(config) or 0)
    text = ctx.inputs.get("input_ids")
    if text is None:
        text = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ids = _splice(text, placeholder_run(config, audio_id, per_sample, AUDIO_MARKERS))
    ctx.inputs["input_ids"] = ids
    if "attention_mask" in ctx.params:
        ctx.inputs["attention_mask"] = _ones(*ids.shape)
    ctx.inputs.update({k: v for k, v in audio.items() if k in ctx.params})


@family_inputs("musicgen", "musicgen_melody")
def musicgen_codes(ctx: InputContext) -> None:
    """MusicGen's decoder reads every codebook of every sample as its own row, (batch *
    num_codebooks, steps), and its labels are (batch, steps, num_codebooks). A decoder built
    alone gets the conditioning its full model hands it (MusicGen cross-attends to it, MusicGen
    Melody prepends it).

    generate starts as the full model starts its decoder for text-to-music: one decoder start
    token per codebook row (the pad/BOS code, as published generation configs set
    decoder_start_token_id; the library default config leaves it unset and the delay pattern
    needs it). An audio prompt would need max_new_tokens >= num_codebooks - 1 to fit the delay
    pattern. A MusicGen Melody decoder built alone generates unconditioned: its generate derives
    the self-attention mask from the (batch * num_codebooks) rows, which cannot be joined to the
    (batch) mask of a prepended conditioning, and a (batch, steps) mask passed in is zero-padded
    over the decode steps, masking them out."""
    import torch

    decoder = getattr(ctx.config, "decoder", None) or ctx.config
    books = int(decoder.num_codebooks)
    steps = int(ctx.rules.get("decoder_seq_len", 8))
    codes = _token_ids(ctx.gen, decoder, (BATCH, steps, books), ctx.avoid)
    rows = codes.permute(0, 2, 1).reshape(BATCH * books, steps)
    key = "decoder_input_ids" if "decoder_input_ids" in ctx.params else "input_ids"
    if ctx.purpose == "generate" and key == "input_ids":
        start = int(decoder.pad_token_id)
        rows = torch.full((BATCH * books, 1), start)
        ctx.inputs["decoder_start_token_id"] = start
    ctx.inputs[key] = rows
    if key == "input_ids":
        ctx.inputs.pop("attention_mask", None)
        if ctx.purpose == "generate" and ctx.spec.model_type == "musicgen_melody":
            ctx.inputs.pop("encoder_hidden_states", None)
        elif "encoder_hidden_states" in ctx.params and "encoder_hidden_states" not in ctx.inputs:
            ctx.inputs["encoder_hidden_states"] = _randn(ctx, BATCH, 4, int(decoder.hidden_size))
    if "labels" in ctx.params:
        ctx.inputs["labels"] = codes


@family_inputs("omniasr_ctc", "omniasr_audio")
def omniasr_waveform(ctx: InputContext) -> None:
    """OmniASR's feature extractor returns mono waveforms (batch, 1, samples) and a per-sample
    padding mask (batch, samples); the CTC head reads the mask for its frame lengths."""
    wave = ctx.inputs["input_values"]
    if "padding_mask" in ctx.params:
        ctx.inputs["padding_mask"] = _ones(wave.shape[0], wave.shape[-1])


@family_inputs("omniasr")
def omniasr_prompt(ctx: InputContext) -> None:
    """OmniASR (wav2vec2 encoder + Llama): a mono waveform and a prompt with one audio token per
    encoder frame."""
    samples = int(ctx.rules.get("samples", 3200))
    audio = {"input_values": _randn(ctx, BATCH, 1, samples), "padding_mask": _ones(BATCH, samples)}
    _audio_prompt(ctx, audio)


@family_inputs("mimi_decoder", "pocket_tts_audio_tokenizer_decoder", replace=True)
def codec_decoder_latents(ctx: InputContext) -> None:
    """A codec decoder built alone decodes continuous latents, (batch, hidden_size, frames), as
    the full codec's `decode` hands them over."""
    frames = int(ctx.rules.get("frames", 8))
    ctx.inputs["latents"] = _randn(ctx, BATCH, int(ctx.config.hidden_size), frames)


@family_inputs("vibevoice_acoustic_tokenizer_encoder", replace=True)
def vibevoice_encoder_waveform(ctx: InputContext) -> None:
    """VibeVoice's acoustic encoder takes the waveform, (batch, channels, samples), as
    `hidden_states`."""
    samples = int(ctx.rules.get("samples", 3200))
    ctx.inputs["hidden_states"] = _randn(ctx, BATCH, int(ctx.config.channels), samples)


@family_inputs("vibevoice_acoustic_tokenizer_decoder", replace=True)
def vibevoice_decoder_latents(ctx: InputContext) -> None:
    """VibeVoice's acoustic decoder takes latents, (batch, hidden_size, frames), as
    `hidden_states`."""
    frames = int(ctx.rules.get("frames", 8))
    ctx.inputs["hidden_states"] = _randn(ctx, BATCH, int(ctx.config.hidden_size), frames)


def _mel_features(ctx: InputContext, audio_config: Any, frames: int) -> dict[str, Any]:
    """Log-mel features (batch, mel_bins, frames) with an all-valid frame mask."""
    bins = int(audio_config.num_mel_bins)
    return {
        "input_features": _randn(ctx, BATCH, bins, frames),
        "input_features_mask": _ones(BATCH, frames),
    }


@family_inputs("qwen3_asr_encoder", replace=True)
def qwen3_asr_encoder_features(ctx: InputContext) -> None:
    """Qwen3-ASR's encoder cuts the mel frames into chunks of 2 * n_window frames: one full
    chunk per sample, with its frame mask."""
    ctx.inputs.update(_mel_features(ctx, ctx.config, 2 * int(ctx.config.n_window)))


@family_inputs("qwen3_asr", replace=True)
def qwen3_asr_prompt(ctx: InputContext) -> None:
    """Qwen3-ASR: one encoder chunk (2 * n_window mel frames) per sample and a prompt with one
    audio token per encoder output position."""
    audio_config = ctx.config.audio_config
    _audio_prompt(ctx, _mel_features(ctx, audio_config, 2 * int(audio_config.n_window)))


def _stacked_frames(ctx: InputContext, audio_config: Any, frames: int) -> dict[str, Any]:
    """Low-frame-rate features (batch, frames, mel_bins * stacked_frames) with a frame mask."""
    width = int(audio_config.input_size)
    return {
        "input_features": _randn(ctx, BATCH, frames, width),
        "input_features_mask": _ones(BATCH, frames),
    }


@family_inputs("fun_asr_nano_encoder", replace=True)
def fun_asr_encoder_features(ctx: InputContext) -> None:
    """Fun-ASR's feature extractor stacks num_stacked_frames mel frames into one low-frame-rate
    frame: (batch, frames, num_mel_bins * num_stacked_frames), plus the frame mask."""
    ctx.inputs.update(_stacked_frames(ctx, ctx.config, int(ctx.rules.get("frames", 16))))


@family_inputs("fun_asr_nano", replace=True)
def fun_asr_prompt(ctx: InputContext) -> None:
    """Fun-ASR-Nano: stacked low-frame-rate features and one audio token per projected frame."""
    audio = _stacked_frames(ctx, ctx.config.audio_config, int(ctx.rules.get("frames", 16)))
    _audio_prompt(ctx, audio)


def _tower_positions(ctx: InputContext, frames: int) -> int:
    """Audio positions per clip of `frames` frames, from the audio tower's own length
    arithmetic (its last value: the lengths after pooling)."""
    import torch

    model = ctx.model
    tower = getattr(model, "audio_tower", None) or model.model.audio_tower
    lengths = tower._get_feat_extract_output_lengths(torch.tensor([frames]))
    lengths = lengths[-1] if isinstance(lengths, tuple) else lengths
    return int(lengths[0])


@family_inputs("musicflamingo", replace=True)
def musicflamingo_prompt(ctx: InputContext) -> None:
    """Music Flamingo: Whisper-style mel windows (2 * max_source_positions frames) and a prompt
    with one audio token per pooled encoder position; the audio rotary time embedding reads
    the audio-token runs back out of input_ids."""
    audio_config = ctx.config.audio_config
    frames = 2 * int(audio_config.max_source_positions)
    _audio_prompt(ctx, _mel_features(ctx, audio_config, frames), _tower_positions(ctx, frames))


@family_inputs("moss_transcribe_diarize", replace=True)
def moss_prompt(ctx: InputContext) -> None:
    """MOSS-Transcribe-Diarize: one Whisper window (2 * max_source_positions mel frames) per
    sample, its frame mask, the raw-audio padding mask (160 samples per mel frame), and one
    audio token per merged group of encoder frames."""
    audio_config = ctx.config.audio_config
    frames = 2 * int(audio_config.max_source_positions)
    audio = {**_mel_features(ctx, audio_config, frames), "padding_mask": _ones(BATCH, frames * 160)}
    _audio_prompt(ctx, audio)


@family_inputs("granite_speech", "granite_speech_plus", replace=True)
def granite_speech_prompt(ctx: InputContext) -> None:
    """Granite Speech: stacked log-mel frames (batch, frames, input_dim) into the conformer, and
    one audio token per Q-Former projector output."""
    width = int(ctx.config.encoder_config.input_dim)
    frames = int(ctx.rules.get("frames", 64))
    _audio_prompt(ctx, {"input_features": _randn(ctx, BATCH, frames, width)})


@family_inputs("granite_speech5_encoder", "granite_speech5_ctc", replace=True)
def granite_speech5_features(ctx: InputContext) -> None:
    """Granite Speech 5: four mel frames stacked per encoder frame, (batch, frames,
    4 * num_mel_bins), and the encoder-frame mask the CTC loss reads its lengths from."""
    encoder = getattr(ctx.config, "encoder_config", None) or ctx.config
    frames = int(ctx.rules.get("frames", 32))
    width = 4 * int(encoder.num_mel_bins)
    ctx.inputs["input_features"] = _randn(ctx, BATCH, frames, width)
    if "attention_mask" in ctx.params:
        ctx.inputs["attention_mask"] = _ones(BATCH, frames)


@family_inputs("voxtral_realtime", replace=True)
def voxtral_realtime_stream(ctx: InputContext) -> None:
    """Voxtral Realtime streams: each text position adds the audio embedding of its time step,
    so the text is exactly as long as the downsampled audio (mel frames, channels first).

    generate takes what the processor returns for offline transcription: the audio and a
    prefill prompt, BOS then one [STREAMING_PAD] per delay token (its id is the tokenizer's, so
    one non-special id stands in for it), shorter than the audio; generate emits one token per
    remaining audio step, so the audio holds the prompt, the new tokens and a spare step."""
    import torch

    config = ctx.config
    audio_config = config.audio_config
    if ctx.purpose == "generate":
        delay = int(config.default_num_delay_tokens)
        steps = 1 + delay + 4
        frames = steps * int(config.audio_length_per_tok)
        features = _randn(ctx, BATCH, int(audio_config.num_mel_bins), frames)
        stream_pad = int(_token_ids(ctx.gen, config, (1, 1), ctx.avoid)[0, 0])
        bos = int(config.text_config.bos_token_id)
        ids = torch.tensor([[bos] + [stream_pad] * delay] * BATCH)
        ctx.inputs = {
            "input_features": features, "input_ids": ids, "attention_mask": _ones(*ids.shape),
            "num_delay_tokens": delay,
        }  # fmt: skip
        return
    frames = int(ctx.rules.get("frames", 64))
    audio = {"input_features": _randn(ctx, BATCH, int(audio_config.num_mel_bins), frames)}
    steps = _count_feature_tokens(ctx.model, ctx.config, audio, getter="get_audio_features")
    ids = _token_ids(ctx.gen, ctx.config, (BATCH, steps // BATCH), ctx.avoid)
    ctx.inputs.update(audio, input_ids=ids)
    if "attention_mask" in ctx.params:
        ctx.inputs["attention_mask"] = _ones(*ids.shape)
    if "num_delay_tokens" in ctx.params:
        ctx.inputs["num_delay_tokens"] = int(ctx.config.default_num_delay_tokens)


@family_inputs("neucodec", "xcodec2", replace=True)
def semantic_codec_inputs(ctx: InputContext) -> None:
    """X-Codec2 / NeuCodec take what their feature extractor returns: the waveform (batch, 1,
    samples) padded to whole hops, its padding mask, and w2v-BERT filterbank features for the
    semantic encoder (two 10 ms frames stacked per hop/160 step: (batch, frames, 2 * mel))."""
    hop = 320
    samples = int(ctx.rules.get("samples", 3200)) // hop * hop
    semantic = ctx.config.semantic_model_config
    width = int(semantic.feature_projection_input_dim)
    frames = samples // hop
    ctx.inputs.update(
        input_values=_randn(ctx, BATCH, 1, samples),
        padding_mask=_ones(BATCH, samples),
        input_features=_randn(ctx, BATCH, frames, width),
        input_features_mask=_ones(BATCH, frames),
    )


@family_inputs("speech-encoder-decoder")
def speech_encoder_inputs(ctx: InputContext) -> None:
    """SpeechEncoderDecoder: the speech encoder's own input (a raw waveform for wav2vec2-style
    encoders, log-mel frames otherwise) beside the decoder's text."""
    from model_configs.libraries.transformers.build import _audio_features

    encoder = ctx.model.encoder
    if encoder.main_input_name == "input_values":
        samples = int(ctx.rules.get("samples", 3200))
        ctx.inputs["input_values"] = _randn(ctx, BATCH, samples)
    else:
        ctx.inputs["input_features"] = _audio_features(ctx.gen, encoder.config, ctx.rules)


@family_inputs("kyutai_speech_to_text")
def kyutai_stream(ctx: InputContext) -> None:
    """Kyutai STT streams one text token and num_codebooks Mimi audio codes per step:
    input_ids is (batch, steps, 1 + num_codebooks); the labels are the text column. generate
    takes what the processor returns instead: the 24 kHz waveform (batch, 1, samples) and its
    padding mask; it starts from the BOS token, encodes the audio with the bundled Mimi codec
    and emits one text token per codec frame (frame_size samples), so the clip holds one frame
    per new token and a spare."""
    import torch

    config = ctx.config
    if ctx.purpose == "generate":
        samples = 4 * int(config.codec_config.frame_size)
        ctx.inputs = {
            "input_values": _randn(ctx, BATCH, 1, samples),
            "padding_mask": _ones(BATCH, samples),
        }
        return
    text = ctx.inputs["input_ids"]
    books = int(config.num_codebooks)
    codes = torch.randint(
        0, int(config.codebook_vocab_size), (BATCH, text.shape[1], books), generator=ctx.gen
    )
    ctx.inputs["input_ids"] = torch.cat([text.unsqueeze(-1), codes], dim=-1)
    if "labels" in ctx.params:
        ctx.inputs["labels"] = text.clone()


@family_inputs("clvp")
def clvp_inputs(ctx: InputContext) -> None:
    """CLVP scores text against speech: the text, the conditioning clip's log-mel features
    (batch, feature_size, frames), and the contrastive loss it trains with."""
    audio = ctx.config.decoder_config
    bins = int(getattr(audio, "feature_size", 80))
    frames = int(ctx.rules.get("frames", 64))
    ctx.inputs["input_features"] = _randn(ctx, BATCH, bins, frames)
    if "return_loss" in ctx.params:
        ctx.inputs["return_loss"] = True


@family_inputs("dia", replace=True)
def dia_inputs(ctx: InputContext) -> None:
    """Dia, as its processor prepares training: byte-level text into the encoder, the delayed
    audio codes (batch, steps, num_channels) into the decoder, and labels flattened to
    (batch * num_channels, steps)."""
    config = ctx.config
    text = _token_ids(ctx.gen, config.encoder_config, (BATCH, ctx.seq), ctx.avoid)
    decoder = config.decoder_config
    steps = int(ctx.rules.get("decoder_seq_len", 8))
    codes = _token_ids(ctx.gen, decoder, (BATCH, steps, int(decoder.num_channels)), ctx.avoid)
    labels = codes.transpose(1, 2).reshape(-1, steps).contiguous()
    ctx.inputs.update(
        input_ids=text, attention_mask=_ones(*text.shape), decoder_input_ids=codes, labels=labels
    )


@family_inputs("gemma4_audio", replace=True)
def gemma4_audio_features(ctx: InputContext) -> None:
    """Gemma 4's audio encoder reads log-mel frames (batch, frames, 128: its feature extractor's
    feature_size, which the config does not record) and a valid-frame mask (True for real
    frames)."""
    import torch

    frames, bins = int(ctx.rules.get("frames", 64)), 128
    ctx.inputs["input_features"] = _randn(ctx, BATCH, frames, bins)
    ctx.inputs["attention_mask"] = torch.ones(BATCH, frames, dtype=torch.bool)


@family_inputs("higgs_audio_v2", replace=True)
def higgs_audio_prompt(ctx: InputContext) -> None:
    """Higgs Audio v2 trains on a chat whose audio turn is num_codebooks codes per frame:
    audio-token placeholders in the text, the codes (batch, frames, num_codebooks) with a
    valid-frame mask, and the codes again as audio labels."""
    import torch

    config = ctx.config
    frames = int(ctx.rules.get("frames", 8))
    books = int(config.num_codebooks)
    codes = torch.randint(0, int(config.codebook_size), (BATCH, frames, books), generator=ctx.gen)
    audio = {
        "audio_input_ids": codes,
        "audio_input_ids_mask": torch.ones(BATCH, frames, dtype=torch.bool),
        "audio_labels": codes.clone(),
    }
    _audio_prompt(ctx, audio, per_sample=frames)


@family_inputs("pocket_tts", "gradium_phonon_tts", replace=True)
def latent_tts_training(ctx: InputContext) -> None:
    """Pocket TTS / Gradium Phonon train as their chat template lays a prompt out: the voice
    prompt's latents at audio-prompt positions (after the prompt BOS, when the model has one),
    the text, then the audio BOS and one latent position per target frame (voice latents are
    audio_prompt_dim wide when the config says so); the target latents are the labels (teacher forcing, flow and end-of-speech losses)."""
    import torch

    config = ctx.config
    voice, frames = int(ctx.rules.get("voice_frames", 4)), int(ctx.rules.get("frames", 4))
    dim = int(config.latent_dim)
    prompt_bos = getattr(config, "audio_prompt_bos_token_id", None)
    head = ([prompt_bos] if isinstance(prompt_bos, int) else []) + [
        config.audio_prompt_token_id
    ] * voice
    tail = [config.audio_bos_token_id] + [config.audio_latent_token_id] * frames
    text = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ids = torch.cat([torch.tensor([head] * BATCH), text, torch.tensor([tail] * BATCH)], dim=1)
    ctx.inputs.update(
        input_ids=ids,
        attention_mask=_ones(*ids.shape),
        audio_prompt_latents=_randn(
            ctx, BATCH, voice, int(getattr(config, "audio_prompt_dim", dim))
        ),
        audio_prompt_latents_mask=_ones(BATCH, voice),
        labels=_randn(ctx, BATCH, frames, dim),
        labels_mask=_ones(BATCH, frames),
    )


@family_inputs("nemotron3_5_transcribe_audio", replace=True)
def nemotron_transcribe_audio_features(ctx: InputContext) -> None:
    """Nemotron 3.5 Transcribe's audio model (ASR encoder beside the diarization encoder) reads
    log-mel frames (batch, frames, num_mel_bins) with a frame mask."""
    bins = int(ctx.config.asr_config.num_mel_bins)
    frames = int(ctx.rules.get("frames", 64))
    ctx.inputs["input_features"] = _randn(ctx, BATCH, frames, bins)
    ctx.inputs["input_features_mask"] = _ones(BATCH, frames)


@family_inputs("nemo_speechlm", replace=True)
def nemotron_transcribe_prompt(ctx: InputContext) -> None:
    """Nemotron 3.5 Transcribe (NeMo SpeechLM): log-mel frames (batch, frames, num_mel_bins)
    with their mask, and one audio token per pooled audio-tower position."""
    bins = int(ctx.config.audio_config.asr_config.num_mel_bins)
    frames = int(ctx.rules.get("frames", 64))
    audio = {
        "input_features": _randn(ctx, BATCH, frames, bins),
        "input_features_mask": _ones(BATCH, frames),
    }
    _audio_prompt(ctx, audio)


@family_inputs("nemotron3_5_transcribe_word_timestamp", replace=True)
def word_timestamp_states(ctx: InputContext) -> None:
    """Nemotron 3.5's word-timestamp encoder runs on the speech encoder's hidden states,
    (batch, frames, hidden_size), with their frame mask."""
    frames = int(ctx.rules.get("frames", 16))
    ctx.inputs["inputs_embeds"] = _randn(ctx, BATCH, frames, int(ctx.config.hidden_size))
    ctx.inputs["attention_mask"] = _ones(BATCH, frames)


@family_inputs("pe_audio")
def pe_audio_pairs(ctx: InputContext) -> None:
    """PE Audio is a CLIP-style audio-text model: captions beside mono waveforms (batch, 1,
    samples), trained with its contrastive loss."""
    samples = int(ctx.rules.get("samples", 3200))
    ctx.inputs["input_values"] = _randn(ctx, BATCH, 1, samples)
    if "return_loss" in ctx.params:
        ctx.inputs["return_loss"] = True


@family_inputs("vibevoice_asr", replace=True)
def vibevoice_asr_prompt(ctx: InputContext) -> None:
    """VibeVoice-ASR: mono 24 kHz waveforms (batch, 1, samples), two tokenizer hops long, with
    their padding mask (batch, samples), and one audio token per acoustic/semantic latent frame."""
    import torch

    hop = int(ctx.config.acoustic_tokenizer_encoder_config.hop_length)
    samples = 2 * hop
    audio = {
        "input_values": _randn(ctx, BATCH, 1, samples),
        "padding_mask": torch.ones(BATCH, samples, dtype=torch.bool),
    }
    _audio_prompt(ctx, audio)


@family_inputs("csm", replace=True)
def csm_training(ctx: InputContext) -> None:
    """CSM trains as its processor lays a turn out (output_labels=True): text, one audio token
    per Mimi frame of the clip and the audio EOS token; the clip as (batch, 1, samples) with its
    cutoffs; labels that mark the audio frames (the model fills in their codes) and ignore
    the text."""
    import torch

    config = ctx.config
    samples = int(ctx.rules.get("samples", 3840))
    wave = _randn(ctx, BATCH, 1, samples)
    with torch.no_grad():
        frames = int(ctx.model.codec_model.encode(wave[:1]).audio_codes.shape[-1])
    audio_id, eos_id = int(config.audio_token_id), int(config.audio_eos_token_id)
    text = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ids = _splice(text, [audio_id] * frames + [eos_id])
    labels = torch.full_like(ids, -100)
    labels[(ids == audio_id) | (ids == eos_id)] = audio_id
    ctx.inputs.update(
        input_ids=ids,
        attention_mask=_ones(*ids.shape),
        input_values=wave,
        input_values_cutoffs=torch.full((BATCH, 1), samples),
        labels=labels,
    )


@family_inputs("vibevoice", replace=True)
def vibevoice_tts_training(ctx: InputContext) -> None:
    """VibeVoice trains on a speech turn: mono waveforms (batch, 1, samples), two acoustic
    tokenizer hops long, one audio token per acoustic latent, and the acoustic loss mask that
    puts the diffusion loss on those positions beside the text loss. generate takes what the
    processor returns without output_labels: the same voice-prompt turn and its attention mask,
    asking for the generate output with its token sequences (by default VibeVoice's generate
    returns only the synthesized audio chunks, a list with None where no speech was emitted)."""
    import torch

    hop = int(ctx.config.audio_config.hop_length)
    samples = 2 * hop
    audio = {
        "input_values": _randn(ctx, BATCH, 1, samples),
        "padding_mask": torch.ones(BATCH, samples, dtype=torch.bool),
    }
    _audio_prompt(ctx, audio)
    if ctx.purpose == "generate":
        ctx.inputs["attention_mask"] = _ones(*ctx.inputs["input_ids"].shape)
        ctx.inputs["return_dict_in_generate"] = True
        return
    ctx.inputs["acoustic_loss_mask"] = ctx.inputs["input_ids"] == int(ctx.config.audio_token_id)
