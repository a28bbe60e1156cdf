"""Input checks shared by the sparse attention functions (queries, keys, values, selections)."""

import torch
from torch import Tensor

from attnbook.core._checks import (
    check_floating,
    check_int,
    check_same_dtype,
    check_scale,
    check_tensor,
    shape_of,
)
from attnbook.core.heads import repeat_kv


def check_qkv(q: object, k: object, v: object, scale: object) -> None:
    """q (B, H, T, d), k (B, H_kv, S, d), v (B, H_kv, S, d_v), H_kv dividing H, one dtype."""
    check_tensor("q", q, "(B, H, T, d_head)", rank=4)
    check_tensor("k", k, "(B, H_kv, S, d_head)", rank=4)
    check_tensor("v", v, "(B, H_kv, S, d_v)", rank=4)
    check_floating("q", q)
    check_same_dtype("k", k, q, "q")
    check_same_dtype("v", v, q, "q")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"v: expected the same (B, H_kv, S) as k = {tuple(k.shape[:3])}, got v.shape = "
            f"{shape_of(v)}"
        )
    if k.size(0) != q.size(0) or k.size(-1) != q.size(-1):
        raise ValueError(
            f"k: expected (B, H_kv, S, d_head) with B = {q.size(0)} and d_head = {q.size(-1)} "
            f"as q, got k.shape = {shape_of(k)}"
        )
    if q.size(1) % k.size(1):
        raise ValueError(
            f"k: its H_kv = {k.size(1)} heads must divide the H = {q.size(1)} query heads, got "
            f"k.shape = {shape_of(k)}"
        )
    if scale is not None:
        check_scale(scale)


def expand_heads(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """k and v with each key/value head copied for its group of query heads: (B, H, S, d)."""
    n_repeats = q.size(1) // k.size(1)
    return repeat_kv(k, n_repeats), repeat_kv(v, n_repeats)


def check_causal_self(q: Tensor, k: Tensor) -> None:
    """Causal self-attention: as many queries as keys (T = S)."""
    if q.size(2) != k.size(2):
        raise ValueError(
            f"k: causal self-attention needs as many keys as queries (S = T = {q.size(2)}), "
            f"got k.shape = {shape_of(k)}"
        )


def check_block_size(block_size: object, key_len: int) -> None:
    """A block holds between 1 and S keys."""
    check_int("block_size", block_size)
    if block_size > key_len:
        raise ValueError(
            f"block_size: expected an int in [1, S = {key_len}] (a block of keys), got {block_size}"
        )


def check_top_k(name: str, top_k: object, available: int, what: str) -> None:
    """Between 1 and ``available`` (the number of ``what`` there are to choose from)."""
    check_int(name, top_k)
    if top_k > available:
        raise ValueError(
            f"{name}: expected an int in [1, {available}] (there are {available} {what}), got "
            f"{top_k}"
        )


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precision is scored and normalised in float32, as in core attention."""
    return torch.promote_types(dtype, torch.float32)
