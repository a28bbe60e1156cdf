"""Attention sinks: somewhere for a head to put the weight it does not want to spend.

A softmax row must sum to 1, so a head with nothing useful to read still has to spread its
weight over the keys. Trained models learn to park it on a token whose value changes little
(the first token: an *attention sink*). Two remedies from today's models live here:

* :func:`attention_with_sinks`: gpt-oss's learned per-head sink, one logit per head joined to
  every row of scores before the softmax and dropped after it, so a row may sum to less than 1.
* :func:`streaming_mask`: StreamingLLM's recipe for a window that slides past the first
  tokens, keeping the first ``n_sink`` keys visible as well as the last ``window``.

:func:`add_sinks_from_lse` gives :func:`attention_with_sinks`' output from an ordinary
attention output and its log-sum-exp: how a sink is added to a fused kernel that returns the
log-sum-exp. To run a whole :class:`attnbook.TinyDecoder` under a streaming mask, pass it as
``model(tokens, mask=...)``.
"""

import math

import torch
from torch import Tensor

from attnbook.core._checks import (
    check_attention_inputs,
    check_floating,
    check_int,
    check_tensor,
    shape_of,
)
from attnbook.core.attention import masked_softmax
from attnbook.core.masks import causal_mask, sliding_window_mask
from attnbook.core.trace import record


def _check_sinks(sinks: object, query: Tensor) -> None:
    check_tensor("query", query, "(..., H, T, d)")
    if query.dim() < 3:
        raise ValueError(
            f"query: expected shape (..., H, T, d) with a head dim, got query.shape = "
            f"{shape_of(query)}"
        )
    n_heads = query.size(-3)
    if not isinstance(sinks, Tensor) or sinks.shape != (n_heads,):
        got = shape_of(sinks) if isinstance(sinks, Tensor) else type(sinks).__name__
        raise ValueError(
            f"sinks: expected one logit per head, shape (H,) = ({n_heads},) as query's head "
            f"dim, got {got}"
        )
    check_floating("sinks", sinks)


def attention_with_sinks(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    sinks: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention with a learned sink logit per head (gpt-oss), returning ``(output, weights)``.

    query (..., H, T, d), key (..., H, S, d), value (..., H, S, d_v) (batch dims broadcast as in
    :func:`attnbook.scaled_dot_product_attention`); sinks (H,), one logit per head. Every row of
    scores (..., H, T, S) gets the head's sink as an extra column S + 1; the softmax runs over
    the S + 1 columns and the sink's column is dropped, so the weights (..., H, T, S) sum to
    1 - p_sink <= 1 and the output is their weighted sum of the values: the sink has no value.
    A sink of -inf is plain attention; gradients flow to ``sinks``. Masks and ``is_causal`` as in
    :func:`attnbook.scaled_dot_product_attention`; a fully masked row is all sink (zero output).
    """
    check_attention_inputs(query, key, value, mask, is_causal, scale)
    _check_sinks(sinks, query)
    if is_causal:
        mask = causal_mask(query.size(-2), key.size(-2), device=query.device)  # (T, S)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    work_dtype = torch.promote_types(query.dtype, torch.float32)
    scores = (query.to(work_dtype) @ key.to(work_dtype).transpose(-2, -1)) * scale  # (..., H, T, S)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(work_dtype)
    # one column per row, the head's sink logit: (..., H, T, 1)
    sink_column = sinks.to(work_dtype)[:, None, None].expand(*scores.shape[:-1], 1)
    with_sink = torch.cat([scores, sink_column], dim=-1)  # (..., H, T, S + 1)
    record("scores with sink", with_sink, "... H T S+1", "each head's sink logit as a last column")
    weights = masked_softmax(with_sink)[..., :-1].to(value.dtype)  # (..., H, T, S)
    record("weights", weights, "... H T S", "the sink's column dropped: rows sum to <= 1")
    return weights @ value, weights  # (..., H, T, d_v), (..., H, T, S)


def add_sinks_from_lse(output: Tensor, lse: Tensor, sinks: Tensor) -> Tensor:
    """The output of :func:`attention_with_sinks` from plain attention's output and log-sum-exp.

    output (..., H, T, d_v) and lse (..., H, T), the log of each row's softmax denominator,
    from the same attention without sinks (a fused kernel returns both). With a sink s the
    denominator grows from e^lse to e^lse + e^s, so every weight shrinks by the factor
    e^lse / (e^lse + e^s) = sigmoid(lse - s): the output does too, and no kernel has to change.
    A row with no key to attend to (lse = -inf) stays 0 whatever its sink, -inf included, as in
    :func:`attention_with_sinks`; gradients stay finite.
    """
    _check_sinks(sinks, output)
    check_tensor("lse", lse, "(..., H, T)", rank=output.dim() - 1)
    if lse.shape != output.shape[:-1]:
        raise ValueError(
            f"lse: expected shape (..., H, T) = {tuple(output.shape[:-1])} as output without its "
            f"last dim, got lse.shape = {shape_of(lse)}"
        )
    no_keys = lse == float("-inf")  # (..., H, T): lse - s would be NaN for a sink of -inf
    gap = torch.where(no_keys, float("-inf"), lse - sinks.to(lse.dtype)[:, None])  # (..., H, T)
    keep = torch.sigmoid(gap)  # (..., H, T)
    return output * keep[..., None].to(output.dtype)  # (..., H, T, d_v)


def streaming_mask(
    query_len: int,
    window: int,
    n_sink: int,
    key_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """StreamingLLM's (T, S) mask: the last ``window`` keys plus the first ``n_sink`` keys.

    :func:`attnbook.sliding_window_mask` (queries the last T of S positions) with keys
    0 .. n_sink - 1 visible to every query that is at or after them. ``n_sink=0`` is the plain
    window.
    """
    check_int("n_sink", n_sink, low=0)
    window_mask = sliding_window_mask(query_len, window, key_len, device=device)  # (T, S)
    key_len = window_mask.size(1)
    sink_keys = torch.arange(key_len, device=device) < n_sink  # (S,)
    causal = causal_mask(query_len, key_len, align="bottom-right", device=device)  # (T, S)
    return window_mask | (causal & sink_keys)  # (T, S)
