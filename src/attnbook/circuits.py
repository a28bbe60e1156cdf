"""Three scores that name what a head of causal self-attention does.

Each takes attention weights ``(..., T, T)`` (queries as rows, keys as columns) and returns
one number per leading index, shape ``weights.shape[:-2]``: the mean, over the queries that
have such a key, of the weight on

- :func:`previous_token_score`: key ``t - 1`` (queries ``t = 1 .. T - 1``);
- :func:`induction_score`: key ``t - period + 1``, the token *after* the earlier occurrence of
  the current token in a sequence that repeats with period ``period`` (queries
  ``t = period .. T - 1``); Olsson et al.'s prefix-matching score;
- :func:`sink_score`: key 0, the first position (queries ``t = 1 .. T - 1``; query 0 can only
  look at itself).

Under a head that spreads its weight evenly over the keys it may see, query ``t`` gives each
key ``1 / (t + 1)``: that is the level each score has by chance. For sequences that start with
a BOS token, pass the weights the score means: ``weights[..., 1:, 1:]`` to score the repeated
tokens alone.
"""

import torch
from torch import Tensor

from attnbook._checks import check_floating, check_tensor, shape_of


def _check_weights(weights: object) -> int:
    """``weights`` is a floating (..., T, T) tensor with T >= 2; returns T."""
    check_tensor("weights", weights, "(..., T, T)")
    check_floating("weights", weights)
    length, keys = weights.shape[-2:]
    if length != keys:
        raise ValueError(
            f"weights: expected square causal self-attention weights (..., T, T), got "
            f"weights.shape = {shape_of(weights)}"
        )
    if length < 2:
        raise ValueError(
            f"weights: expected T >= 2 (query 1 is the first with an earlier key), got "
            f"weights.shape = {shape_of(weights)}"
        )
    return length


def _check_period(period: object, length: int, lead: torch.Size) -> Tensor:
    """``period`` as an integer tensor broadcast to ``lead``, every value in 1 .. T - 1."""
    expected = (
        f"an int or an integer tensor broadcastable to {tuple(lead)} with values in "
        f"[1, {length - 1}]"
    )
    if isinstance(period, bool) or not isinstance(period, int | Tensor):
        raise ValueError(f"period: expected {expected}, got {type(period).__name__}")
    if isinstance(period, Tensor) and (
        period.dtype.is_floating_point or period.dtype.is_complex or period.dtype == torch.bool
    ):
        raise ValueError(f"period: expected {expected}, got dtype {period.dtype}")
    period = torch.as_tensor(period)
    try:
        period = period.broadcast_to(lead)
    except RuntimeError:
        raise ValueError(
            f"period: expected {expected}, got period.shape = {shape_of(period)}"
        ) from None
    if period.numel() and (period.min() < 1 or period.max() > length - 1):
        raise ValueError(
            f"period: expected {expected}, got values from {period.min().item()} to "
            f"{period.max().item()}"
        )
    return period


def previous_token_score(weights: Tensor) -> Tensor:
    """Mean weight on key t - 1 over queries t = 1 .. T - 1: shape ``weights.shape[:-2]``."""
    _check_weights(weights)
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # (...,)


def induction_score(weights: Tensor, period: int | Tensor) -> Tensor:
    """Mean weight on key t - period + 1 over queries t = period .. T - 1.

    ``period``: an int, or an integer tensor broadcastable to ``weights.shape[:-2]`` (one
    period per sequence: shape (B, 1) for (B, H, T, T) weights). Returns shape
    ``weights.shape[:-2]``.
    """
    length = _check_weights(weights)
    lead = weights.shape[:-2]
    period = _check_period(period, length, lead).to(weights.device)  # (...,)
    queries = torch.arange(length, device=weights.device)  # (T,)
    keys = queries - period[..., None] + 1  # (..., T)
    valid = keys >= 1  # queries t >= period
    on_key = weights.gather(-1, keys.clamp(min=0)[..., None]).squeeze(-1)  # (..., T)
    total = (on_key * valid).sum(dim=-1)  # (...,)
    return total / valid.sum(dim=-1)  # (...,)


def sink_score(weights: Tensor) -> Tensor:
    """Mean weight on key 0 over queries t = 1 .. T - 1: shape ``weights.shape[:-2]``."""
    _check_weights(weights)
    return weights[..., 1:, 0].mean(dim=-1)  # (...,)
