"""Attention over the keys a table of indices names: the common core of every method here.

Row ``indices[b, h, t]`` lists the keys query t of head h reads, ``-1`` meaning "no key" (a
free slot). The query scores only those keys, takes a softmax over them and sums their values:
exactly dense attention under the boolean mask that is True at the listed keys
(:func:`selection_mask`). A key listed twice is refused rather than counted once or twice:
counting it twice would double its weight, and counting it once would hide a bug in the
selection that made it.
"""

import math

import torch
from torch import Tensor

from attnbook.core._checks import check_tensor, shape_of
from attnbook.core.attention import masked_softmax
from attnbook.core.trace import record
from attnbook.sparse._inputs import check_qkv, expand_heads, work_dtype

NO_KEY = -1


def check_indices(indices: object, batch: int, n_heads: int, query_len: int, key_len: int) -> None:
    """(B, H or 1, T, k_sel) integer indices in [-1, S - 1], no key listed twice in a row."""
    layout = f"(B, H, T, k_sel) = ({batch}, {n_heads} or 1, {query_len}, k_sel)"
    check_tensor("indices", indices, layout, rank=4)
    if indices.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"indices: expected dtype torch.int64 or torch.int32, got {indices.dtype}")
    batch_ok = indices.size(0) == batch and indices.size(2) == query_len
    if not batch_ok or indices.size(1) not in (1, n_heads):
        raise ValueError(
            f"indices: expected shape {layout}, got indices.shape = {shape_of(indices)}"
        )
    if indices.numel() == 0:
        return
    low, high = indices.min().item(), indices.max().item()
    if low < NO_KEY or high >= key_len:
        raise ValueError(
            f"indices: expected key positions in [0, S - 1 = {key_len - 1}] or -1 for no key, "
            f"got values from {low} to {high}"
        )
    ordered = indices.sort(dim=-1).values  # (B, H, T, k_sel)
    repeated = (ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] != NO_KEY)
    if repeated.any():
        b, h, t, _ = repeated.nonzero()[0].tolist()
        raise ValueError(
            f"indices: row (b={b}, h={h}, t={t}) lists a key twice ({indices[b, h, t].tolist()}); "
            "each key may be listed once (a repeat would double its weight)"
        )


def selection_mask(indices: Tensor, key_len: int) -> Tensor:
    """The boolean mask (B, H or 1, T, S) that is True at the keys ``indices`` lists."""
    check_tensor("indices", indices, "(B, H, T, k_sel)", rank=4)
    mask = torch.zeros(*indices.shape[:3], key_len + 1, dtype=torch.bool, device=indices.device)
    # slot S collects the -1 entries, then is dropped: (B, H, T, S + 1)
    mask.scatter_(-1, torch.where(indices < 0, key_len, indices).long(), True)
    return mask[..., :key_len]  # (B, H, T, S)


def topk_attention(
    q: Tensor, k: Tensor, v: Tensor, indices: Tensor, *, scale: float | None = None
) -> Tensor:
    """Each query attends to the keys its row of ``indices`` names; returns (B, H, T, d_v).

    q (B, H, T, d_head), k (B, H_kv, S, d_head), v (B, H_kv, S, d_v), H_kv dividing H;
    indices (B, H, T, k_sel), or (B, 1, T, k_sel) to share one choice across heads as DeepSeek's
    sparse attention does; -1 = no key. A row with no key at all gets a zero output and zero
    gradients. Duplicates are refused (ValueError). The keys are gathered, so the work and the
    memory grow with T * k_sel, not T * S. scale defaults to 1 / sqrt(d_head).
    """
    check_qkv(q, k, v, scale)
    batch, n_heads, query_len, head_dim = q.shape
    check_indices(indices, batch, n_heads, query_len, k.size(2))
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    k, v = expand_heads(q, k, v)  # (B, H, S, d_head), (B, H, S, d_v)
    n_selected = indices.size(-1)
    slots = indices.clamp(min=0).long().expand(batch, n_heads, -1, -1)  # (B, H, T, k_sel)
    flat = slots.reshape(batch, n_heads, query_len * n_selected, 1)  # (B, H, T * k_sel, 1)
    # (B, H, T, k_sel, d_head): the keys each query reads, side by side
    k_sel = k.gather(2, flat.expand(-1, -1, -1, head_dim)).view(*slots.shape, head_dim)
    # (B, H, T, k_sel, d_v)
    v_sel = v.gather(2, flat.expand(-1, -1, -1, v.size(-1))).view(*slots.shape, v.size(-1))
    dtype = work_dtype(q.dtype)
    # (B, H, T, k_sel): one score per listed key
    scores = (k_sel.to(dtype) @ q.to(dtype)[..., None]).squeeze(-1) * scale
    record("scores", scores, "B H T k_sel", "q . k for the k_sel keys each query picked")
    weights = masked_softmax(scores, (indices >= 0).expand_as(scores))  # (B, H, T, k_sel)
    record("weights", weights, "B H T k_sel", "softmax over the picked keys only")
    output = (weights.to(v.dtype)[..., None, :] @ v_sel).squeeze(-2)  # (B, H, T, d_v)
    return output
