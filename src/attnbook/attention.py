"""Scaled dot-product attention, written out so that every step can be read and traced."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnbook._checks import (
    check_mask,
    check_mask_or_causal,
    check_probability,
    check_same_batch_dims,
    check_same_dtype,
    check_tensor,
    shape_of,
)
from attnbook.masks import causal_mask
from attnbook.trace import record


def check_attention_inputs(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, is_causal: bool
) -> None:
    """Raise ``ValueError`` unless query (..., T, d), key (..., S, d), value (..., S, d_v) fit."""
    check_tensor("query", query, "(..., T, d)")
    check_tensor("key", key, "(..., S, d)", rank=query.dim())
    check_tensor("value", value, "(..., S, d_v)", rank=query.dim())
    for name, tensor in (("key", key), ("value", value)):
        check_same_batch_dims(name, tensor, query)
        check_same_dtype(name, tensor, query, "query")
    if key.size(-1) != query.size(-1):
        raise ValueError(
            f"key: expected shape (..., S, d) with d = {query.size(-1)} as in query, got "
            f"key.shape = {shape_of(key)}"
        )
    if value.size(-2) != key.size(-2):
        raise ValueError(
            f"value: expected shape (..., S, d_v) with S = {key.size(-2)} as in key, got "
            f"value.shape = {shape_of(value)}"
        )
    check_mask_or_causal(mask, is_causal)
    if mask is not None:
        scores_shape = (*query.shape[:-1], key.size(-2))
        check_mask(mask, scores_shape, "(..., T, S)")


def masked_softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last dim after masking; a row with nothing to attend to becomes all zeros.

    A boolean ``mask`` (True = attend) sets blocked scores to -inf; a floating mask is added.
    The naive softmax of an all -inf row is 0/0 = NaN, forward and backward. Here the row's
    maximum is taken as 0 when it is -inf and the denominator as 1 when it is 0, so such a row
    gets zero weights and zero gradients. The maximum is detached: softmax does not depend on
    the shift, so its gradient is exactly zero anyway.
    """
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)
    row_max = scores.amax(dim=-1, keepdim=True).detach()  # (..., 1)
    row_max = torch.where(row_max == float("-inf"), 0.0, row_max)
    exp_scores = torch.exp(scores - row_max)  # blocked entries: exp(-inf) = 0
    denominator = exp_scores.sum(dim=-1, keepdim=True)  # (..., 1)
    return exp_scores / torch.where(denominator > 0, denominator, 1.0)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v, returning ``(output, weights)``.

    Shapes: query (..., T, d), key (..., S, d), value (..., S, d_v) with equal batch dims ``...``;
    output (..., T, d_v) and weights (..., T, S), rows over the keys.

    mask: boolean with True = attend (as in ``F.scaled_dot_product_attention``), or floating and
    added to the scores; it must broadcast to (..., T, S). A query row with no key to attend to
    gets zero weights and a zero output, with zero gradients (never NaN).

    is_causal: query i attends to keys 0..i. Like PyTorch this is *top-left* aligned, which for
    T != S is not what a KV cache needs: pass ``causal_mask(T, S, align="bottom-right")`` as the
    mask instead. Giving both ``mask`` and ``is_causal`` is an error.

    scale defaults to 1 / sqrt(d). Dropout with probability ``dropout_p`` is applied to the
    weights (always, as in PyTorch's function; modules pass 0 in eval mode), and the returned
    weights are the ones used, dropout included. Float16 and bfloat16 inputs are scored and
    normalised in float32, so large logits cannot overflow; the output has the input's dtype.
    """
    check_attention_inputs(query, key, value, mask, is_causal)
    check_probability("dropout_p", dropout_p)
    if is_causal:
        mask = causal_mask(query.size(-2), key.size(-2), device=query.device)  # (T, S)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    work_dtype = torch.promote_types(query.dtype, torch.float32)
    scores = (query.to(work_dtype) @ key.to(work_dtype).transpose(-2, -1)) * scale  # (..., T, S)
    record("scores", scores, "... T S", "q . k * scale for every query-key pair")
    weights = masked_softmax(scores, mask)  # (..., T, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    weights = weights.to(value.dtype)
    record("weights", weights, "... T S", "softmax over keys: each row sums to 1")
    output = weights @ value  # (..., T, d_v)
    record("attended", output, "... T d_v", "weighted sum of values, one row per query")
    return output, weights
