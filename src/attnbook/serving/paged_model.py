"""One forward pass of a :class:`attnbook.TinyDecoder` whose keys and values live in a paged cache.

:func:`paged_forward` runs the model's own modules (embeddings through
:meth:`attnbook.TinyDecoder.embed_at`, each block's norms, projections and MLP, the final norm
and LM head) on a batch of sequences that sit at different positions: row b's T tokens are at
``positions[b]``. Each layer writes its new keys and values into the sequences' blocks and
attends through the block tables (:func:`attnbook.paged_attention`). Rotary embeddings are
applied at each row's own positions. Layers whose cache is not keys and values (latent
attention) and ALiBi are refused.
"""

from torch import Tensor, nn

from attnbook.core.heads import merge_heads, split_heads
from attnbook.core.positions import apply_rope
from attnbook.core.trace import record
from attnbook.layers.multihead import GroupedQueryAttention
from attnbook.serving.paged_attention import paged_attention
from attnbook.serving.paged_cache import PagedKVCache


def check_pageable(model: nn.Module) -> None:
    """``model`` is a TinyDecoder whose layers cache plain keys and values."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not hasattr(model, "embed_at"):
        raise ValueError(f"model: expected an attnbook TinyDecoder, got {type(model).__name__}")
    attention = blocks[0].attention
    if type(attention) is not GroupedQueryAttention:
        raise ValueError(
            f"model: paged serving needs layers that cache keys and values (MHA, GQA, MQA); "
            f"got {type(attention).__name__} (a latent cache is not paged here)"
        )
    options = (attention.q_norm, attention.gate_proj, attention.sinks, attention.window)
    if any(option is not None for option in options) or attention.logit_softcap is not None:
        raise ValueError(
            "model: the paged path implements plain attention; QK-norm, output gates, sinks, "
            "sliding windows and soft-capping are not supported"
        )
    if model.positions == "alibi":
        raise ValueError("model: ALiBi models are not supported by the paged path")


def _rotate(x: Tensor, positions: Tensor, attention: GroupedQueryAttention) -> Tensor:
    """x (B, heads, T, d_head) rotated at each row's own ``positions`` (B, T)."""
    batch, n_heads, length, head_dim = x.shape
    flat = x.transpose(0, 1).reshape(n_heads, batch * length, head_dim)  # (heads, B T, d_head)
    flat = apply_rope(flat, positions.flatten(), attention.rope_base, layout=attention.rope_layout)
    return flat.view(n_heads, batch, length, head_dim).transpose(0, 1)  # (B, heads, T, d_head)


def paged_self_attention(
    attention: GroupedQueryAttention,
    x: Tensor,
    positions: Tensor,
    cache: PagedKVCache,
    layer: int,
    seq_ids: list,
) -> Tensor:
    """One attention layer on x (B, T, D) at ``positions`` (B, T): write K, V, then attend."""
    q = split_heads(attention.q_proj(x), attention.n_heads)  # (B, H, T, d_head)
    k = split_heads(attention.k_proj(x), attention.n_kv_heads)  # (B, H_kv, T, d_head)
    v = split_heads(attention.v_proj(x), attention.n_kv_heads)  # (B, H_kv, T, d_head)
    record("q", q, "B H T d_head", "queries of the new tokens")
    record("k", k, "B H_kv T d_head", "new keys, written into the sequences' blocks")
    if attention.rope:
        q, k = _rotate(q, positions, attention), _rotate(k, positions, attention)
    for row, seq_id in enumerate(seq_ids):
        blocks, offsets = cache.slots(seq_id, positions[row])  # (T,) each
        cache.write(layer, blocks[None], offsets[None], k[row : row + 1], v[row : row + 1])
    tables = cache.table_tensor(seq_ids)  # (B, n_max)
    heads = paged_attention(q, cache, layer, tables, positions)  # (B, H, T, d_head)
    return attention.out_proj(merge_heads(heads))  # (B, T, D)


def paged_forward(
    model: nn.Module, tokens: Tensor, positions: Tensor, cache: PagedKVCache, seq_ids: list
) -> Tensor:
    """Logits (B, T, V) for ``tokens`` (B, T) of the sequences ``seq_ids`` at ``positions``.

    Every position written must have been reserved (:meth:`PagedKVCache.reserve`).
    """
    x = model.embed_at(tokens, positions)  # (B, T, D)
    for layer, block in enumerate(model.blocks):
        attended = paged_self_attention(
            block.attention, block.attention_norm(x), positions, cache, layer, seq_ids
        )  # (B, T, D)
        x = x + attended  # (B, T, D)
        if block.mlp is not None:
            x = x + block.mlp(block.mlp_norm(x))  # (B, T, D)
    logits = model.lm_head(model.final_norm(x))  # (B, T, V)
    record("logits", logits, "B T V", "one row per sequence, each at its own position")
    return logits
