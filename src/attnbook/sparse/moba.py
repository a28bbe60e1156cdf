"""MoBA (Lu et al., 2025): each query reads its top-k blocks of keys, scored by the mean key.

The S keys are cut into blocks of ``block_size`` (the last may be shorter). Query t scores every
block that ends before its own by ``q_t . mean(keys of the block)``, keeps the best ``top_k - 1``
of them, and always reads its own block, causally (keys up to t only): ``top_k`` counts the own
block, as in MoBA's gate, which forces the current block into the top k. With fewer earlier
blocks than ``top_k - 1``, it reads them all. Selection is per query head.
"""

import math

import torch
from torch import Tensor

from attnbook.core.masks import causal_mask
from attnbook.sparse._inputs import (
    check_block_size,
    check_causal_self,
    check_qkv,
    check_top_k,
    expand_heads,
    work_dtype,
)
from attnbook.sparse.topk import NO_KEY, selection_mask, topk_attention


def _check(q: Tensor, k: Tensor, v: Tensor, block_size: object, top_k: object, scale) -> int:
    check_qkv(q, k, v, scale)
    check_causal_self(q, k)
    check_block_size(block_size, k.size(2))
    n_blocks = math.ceil(k.size(2) / block_size)
    check_top_k("top_k", top_k, n_blocks, f"blocks of {block_size} in S = {k.size(2)} keys")
    return n_blocks


def block_means(k: Tensor, block_size: int) -> Tensor:
    """The mean key of each block: (B, H, S, d) -> (B, H, n_blocks, d); a short last block too."""
    batch, n_heads, key_len, head_dim = k.shape
    n_blocks = math.ceil(key_len / block_size)
    padded = k.new_zeros(batch, n_heads, n_blocks * block_size, head_dim)
    padded[:, :, :key_len] = k
    sums = padded.view(batch, n_heads, n_blocks, block_size, head_dim).sum(3)  # (B, H, n, d)
    sizes = torch.full((n_blocks,), block_size, dtype=k.dtype, device=k.device)  # (n,)
    sizes[-1] = key_len - (n_blocks - 1) * block_size
    return sums / sizes[:, None]  # (B, H, n_blocks, d)


def moba_blocks(q: Tensor, k: Tensor, *, block_size: int, top_k: int) -> Tensor:
    """The blocks each query reads: (B, H, T, top_k) block ids, own block first, -1 = none.

    q (B, H, T, d), k (B, H_kv, T, d). Future blocks are never chosen; the own block is forced.
    """
    _check(q, k, k, block_size, top_k, None)
    k, _ = expand_heads(q, k, k)  # (B, H, S, d)
    dtype = work_dtype(q.dtype)
    means = block_means(k.to(dtype), block_size)  # (B, H, n_blocks, d)
    gate = q.to(dtype) @ means.transpose(-2, -1)  # (B, H, T, n_blocks): q . mean key
    own = torch.arange(q.size(2), device=q.device) // block_size  # (T,)
    block = torch.arange(means.size(2), device=q.device)  # (n_blocks,)
    gate = gate.masked_fill(block > own[:, None], float("-inf"))  # future blocks: never
    gate = gate.masked_fill(block == own[:, None], float("inf"))  # own block: always
    best = gate.topk(top_k, dim=-1)  # (B, H, T, top_k), sorted: own block first
    return torch.where(best.values > float("-inf"), best.indices, NO_KEY)


def block_keys(blocks: Tensor, block_size: int, key_len: int) -> Tensor:
    """Block ids (B, H, T, n) -> causal key indices (B, H, T, n * block_size), -1 for none."""
    offsets = torch.arange(block_size, device=blocks.device)  # (block_size,)
    keys = blocks[..., None] * block_size + offsets  # (B, H, T, n, block_size)
    query = torch.arange(blocks.size(2), device=blocks.device)[:, None, None]  # (T, 1, 1)
    valid = (blocks[..., None] >= 0) & (keys <= query) & (keys < key_len)
    return torch.where(valid, keys, NO_KEY).flatten(-2)  # (B, H, T, n * block_size)


def moba_mask(q: Tensor, k: Tensor, *, block_size: int, top_k: int) -> Tensor:
    """The keys MoBA lets each query read: a boolean (B, H, T, S) mask, True = read."""
    blocks = moba_blocks(q, k, block_size=block_size, top_k=top_k)  # (B, H, T, top_k)
    chosen = selection_mask(blocks, math.ceil(k.size(2) / block_size))  # (B, H, T, n_blocks)
    key_block = torch.arange(k.size(2), device=k.device) // block_size  # (S,)
    causal = causal_mask(q.size(2), device=q.device)  # (T, S)
    return chosen[..., key_block] & causal  # (B, H, T, S)


def moba_attention(
    q: Tensor, k: Tensor, v: Tensor, *, block_size: int, top_k: int, scale: float | None = None
) -> Tensor:
    """Causal MoBA attention, (B, H, T, d_v): each query reads its top_k blocks (own included).

    q (B, H, T, d_head), k (B, H_kv, T, d_head), v (B, H_kv, T, d_v). The chosen blocks' keys are
    gathered and attended with :func:`attnbook.topk_attention`; the result equals dense attention
    under :func:`moba_mask`. Gradients flow through the attention, not through the choice (a
    top-k is piecewise constant), as in MoBA.
    """
    _check(q, k, v, block_size, top_k, scale)
    blocks = moba_blocks(q, k, block_size=block_size, top_k=top_k)  # (B, H, T, top_k)
    indices = block_keys(blocks, block_size, k.size(2))  # (B, H, T, top_k * block_size)
    return topk_attention(q, k, v, indices, scale=scale)  # (B, H, T, d_v)
