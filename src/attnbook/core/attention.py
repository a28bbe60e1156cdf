"""Scaled dot-product attention, written out so that every step can be read and traced.

:func:`scaled_dot_product_attention` is the explicit computation; :func:`attend` is the one
place where the library's modules choose between it (when the weights are wanted) and
PyTorch's fused kernel (when they are not).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnbook.core._checks import (
    check_attention_inputs,
    check_mask,
    check_positive,
    check_probability,
    check_tensor,
)
from attnbook.core.heads import repeat_kv
from attnbook.core.masks import causal_mask
from attnbook.core.trace import record


def masked_softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last dim after masking; a row with nothing to attend to becomes all zeros.

    A boolean ``mask`` (True = attend) sets blocked scores to -inf; a floating mask is added;
    any other dtype is refused (as by :func:`scaled_dot_product_attention`). The naive softmax
    of an all -inf row is 0/0 = NaN, forward and backward. Here the row's maximum is taken as 0
    when it is -inf and the denominator as 1 when it is 0, so such a row gets zero weights and
    zero gradients. The maximum is detached: softmax does not depend on the shift, so its
    gradient is exactly zero anyway. With no keys at all (S = 0) the result is empty.
    """
    check_tensor("scores", scores, "(..., T, S)")
    if mask is not None:
        check_mask(mask, tuple(scores.shape), "(..., T, S)")
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)
    if scores.size(-1) == 0:
        return scores  # (..., T, 0): no keys, nothing to weigh
    row_max = scores.amax(dim=-1, keepdim=True).detach()  # (..., 1)
    row_max = torch.where(row_max == float("-inf"), 0.0, row_max)
    exp_scores = torch.exp(scores - row_max)  # blocked entries: exp(-inf) = 0
    denominator = exp_scores.sum(dim=-1, keepdim=True)  # (..., 1)
    return exp_scores / torch.where(denominator > 0, denominator, 1.0)


def soft_cap(scores: Tensor, cap: float) -> Tensor:
    """cap * tanh(scores / cap): close to the identity for |score| << cap, never beyond +-cap."""
    check_positive("cap", cap)
    return cap * torch.tanh(scores / cap)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    logit_softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v, returning ``(output, weights)``.

    Shapes: query (..., T, d), key (..., S, d), value (..., S, d_v); the batch dims ``...``
    broadcast together as in PyTorch. Output (..., T, d_v) and weights (..., T, S), rows over
    the keys.

    Unlike PyTorch's ``F.scaled_dot_product_attention``, whose name it shares, it returns the
    weights as well as the output, and its mask argument is called ``mask`` (PyTorch's is
    ``attn_mask``); the meaning of the mask is the same.

    mask: boolean with True = attend (as in ``F.scaled_dot_product_attention``), or floating and
    added to the scores; it must broadcast to (..., T, S). A query row with no key to attend to
    (a fully masked row, or S = 0) gets zero weights and a zero output, with zero gradients
    (never NaN).

    is_causal: query i attends to keys 0..i. Like PyTorch this is *top-left* aligned, which for
    T != S is not what a KV cache needs: pass ``causal_mask(T, S, align="bottom-right")`` as the
    mask instead. Giving both ``mask`` and ``is_causal`` is an error.

    scale defaults to 1 / sqrt(d); it must be finite. Dropout with probability ``dropout_p`` is
    applied to the weights (always, as in PyTorch's function; modules pass 0 in eval mode), and
    the returned weights are the ones used, dropout included. Inputs must be floating point;
    float16 and bfloat16 are scored and normalised in float32, so large logits cannot overflow;
    the output has the input's dtype.

    logit_softcap: a positive c bounds every score to (-c, c) by c * tanh(score / c) after
    scaling and before the mask (Gemma 2's attention soft-capping); None leaves scores as they are.
    """
    check_attention_inputs(query, key, value, mask, is_causal, scale)
    check_probability("dropout_p", dropout_p)
    if logit_softcap is not None:
        check_positive("logit_softcap", logit_softcap)
    if is_causal:
        mask = causal_mask(query.size(-2), key.size(-2), device=query.device)  # (T, S)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    work_dtype = torch.promote_types(query.dtype, torch.float32)
    scores = (query.to(work_dtype) @ key.to(work_dtype).transpose(-2, -1)) * scale  # (..., T, S)
    record("scores", scores, "... T S", "q . k * scale for every query-key pair")
    if logit_softcap is not None:
        scores = soft_cap(scores, logit_softcap)  # (..., T, S), each in (-cap, cap)
        record("capped", scores, "... T S", "cap * tanh(score / cap): bounded scores")
    weights = masked_softmax(scores, mask)  # (..., T, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    weights = weights.to(value.dtype)
    record("weights", weights, "... T S", "softmax over keys: each row sums to 1")
    output = weights @ value  # (..., T, d_v)
    record("attended", output, "... T d_v", "weighted sum of values, one row per query")
    return output, weights


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    logit_softcap: float | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The attention step of every module: explicit when the weights are wanted, else fused.

    q (B, H, T, d), k (B, H_kv, S, d), v (B, H_kv, S, d_v) with H_kv dividing H: query head h
    reads key/value head ``h // (H // H_kv)``. Masks as in :func:`scaled_dot_product_attention`,
    broadcasting to (B, H, T, S). Returns (heads (B, H, T, d_v), weights (B, H, T, S) or None).

    ``need_weights=True`` runs the library's explicit function, after copying each key/value
    head for its group; otherwise PyTorch's fused kernel, which shares the heads itself
    (``enable_gqa``) and never materialises the weights. Both follow the same rules: a query
    with nothing to attend to gets a zero output.

    ``logit_softcap`` (see :func:`scaled_dot_product_attention`) has no fused kernel in
    PyTorch, so with it the explicit function runs whether or not the weights are wanted.
    ``scale`` multiplies the scores (default 1 / sqrt(d)).
    """
    group_size = q.size(1) // k.size(1)
    if need_weights or logit_softcap is not None:
        if group_size > 1:
            k = repeat_kv(k, group_size)  # (B, H, S, d)
            v = repeat_kv(v, group_size)  # (B, H, S, d_v)
            record("k repeated", k, "B H S d_head", "each key head copied for its group")
            record("v repeated", v, "B H S d_head", "each value head copied for its group")
        output, weights = scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            is_causal=is_causal,
            scale=scale,
            dropout_p=dropout_p,
            logit_softcap=logit_softcap,
        )  # (B, H, T, d_v), (B, H, T, S)
        return output, weights if need_weights else None
    if mask is not None and mask.dtype.is_floating_point:
        mask = mask.to(q.dtype)  # PyTorch wants a float mask in the query's dtype
    heads = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=group_size > 1,
    )  # (B, H, T, d_v)
    record("attended", heads, "B H T d_head", "PyTorch's fused kernel; no weights kept")
    return heads, None
