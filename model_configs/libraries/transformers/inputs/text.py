"""Input builders for token sequences that a hint cannot express: text beside a second token
stream (Evolla's protein tokens), packed questions (JEV), drafters fed their target model's
states (Gemma 4's assistants, Muse Glimmer's DFlash drafter), a text tower built alone (see the
package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    _token_ids,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.libraries.transformers.inputs.prompt import (
    randn,
)
from model_configs.tiny_inputs import BATCH


@family_inputs("evolla")
def evolla(ctx: InputContext) -> None:
    """Evolla answers questions about a protein: beside the text it takes the SaProt tokens of
    the protein (amino acid + Foldseek structure letters), framed by <cls> ... <eos>."""
    import torch

    protein = ctx.config.protein_encoder_config
    length = 16
    first = (
        int(getattr(protein, "mask_token_id", 4) or 4) + 1
    )  # past <cls> <pad> <eos> <unk> <mask>
    body = torch.randint(first, int(protein.vocab_size), (BATCH, length - 2), generator=ctx.gen)
    cls = torch.zeros(BATCH, 1, dtype=torch.long)
    eos = torch.full((BATCH, 1), 2, dtype=torch.long)
    ctx.inputs["protein_input_ids"] = torch.cat([cls, body, eos], dim=1)
    ctx.inputs["protein_attention_mask"] = torch.ones(BATCH, length, dtype=torch.long)


@family_inputs("muse_glimmer_assistant", replace=True)
def muse_glimmer_assistant(ctx: InputContext) -> None:
    """The DFlash draft model denoises one block: noise_embeds are the target model's embeddings
    of the anchor token plus block_size - 1 mask tokens, and context_hidden_states the target's
    hidden states at target_layer_ids (concatenated) for the tokens accepted so far."""
    import torch

    config = ctx.config
    width = int(config.hidden_size)
    block = int(config.block_size)
    context = 8
    layers = len(config.target_layer_ids)
    ctx.inputs["noise_embeds"] = torch.randn(BATCH, block, width, generator=ctx.gen)
    ctx.inputs["context_hidden_states"] = torch.randn(
        BATCH, context, width * layers, generator=ctx.gen
    )
    # keys span the context and the block, so the mask does too (the docstring's layout)
    ctx.inputs["attention_mask"] = torch.ones(BATCH, context + block, dtype=torch.long)


@family_inputs("jev", replace=True)
def decision_questions(ctx: InputContext) -> None:
    """JEV scores packed questions the way `DecisionMixin.decide` feeds it: one sequence (batch
    1) holding every question, the positions just past each question's <|mark|> token, and per
    question its type (noul / score / choice, in `Question.questions_types` order) and how many
    options it offers (2 for yes/no, 5 score levels, 4 choices)."""
    import torch
    from transformers.decision import Question

    config = ctx.config
    text = getattr(config, "text_config", None) or config
    steps = ctx.seq
    kinds = list(Question.questions_types)
    options = {"noul": 2, "score": 5, "choice": 4}
    ids = _token_ids(ctx.gen, text, (1, steps), ctx.avoid)
    marks = [steps * (i + 1) // len(kinds) for i in range(len(kinds))]
    ctx.inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "marks": torch.tensor([marks]),
        "num_options": torch.tensor([[options[k] for k in kinds]]),
        "question_type_ids": torch.tensor([list(range(len(kinds)))]),
    }


@family_inputs("gemma4_unified_assistant", "gemma4_assistant", replace=True)
def drafter_step(ctx: InputContext) -> None:
    """Gemma 4's assistant drafts tokens from the target model's state: per drafted position the
    target's token embedding beside its last hidden state (2 * backbone_hidden_size), and the
    keys/values of the target's last layer of each attention kind (shared_kv_states, (batch,
    kv heads, target length, head dim)), which every assistant layer attends to instead of
    computing its own."""
    import torch

    config = ctx.config
    model = ctx.model.model
    drafted, target = 4, ctx.seq
    shared: dict[str, Any] = {}
    for layer in model.layers:
        attn = layer.self_attn
        if attn.layer_type not in shared:
            kv_heads = int(attn.q_proj.out_features // attn.head_dim // attn.num_key_value_groups)
            shape = (BATCH, kv_heads, target, int(attn.head_dim))
            shared[attn.layer_type] = (randn(ctx, *shape), randn(ctx, *shape))
    ctx.inputs = {
        "inputs_embeds": randn(ctx, BATCH, drafted, 2 * int(config.backbone_hidden_size)),
        "attention_mask": torch.ones(BATCH, target, dtype=torch.long),
        "shared_kv_states": shared,
    }


@family_inputs("sam3_lite_text_text_model", replace=True)
def _text_prompt(ctx: InputContext) -> None:
    """A text tower built alone (its class inherits pixel_values as main input): the tokenized
    prompt it encodes."""
    import torch

    from model_configs.libraries.transformers.build import _token_ids

    ctx.inputs["input_ids"] = _token_ids(ctx.gen, ctx.config, (BATCH, ctx.seq), ctx.avoid)
    ctx.inputs["attention_mask"] = torch.ones(BATCH, ctx.seq, dtype=torch.long)
