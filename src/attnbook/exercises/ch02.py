"""Chapter 2's exercise checkers: Luong's concat score; the scale that gives scores of variance 1
when q and k have variance sigma^2.
"""

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)

# Chapter 2: Luong's concat score.


@_checker
def check_concat_scores(fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> None:
    """``fn(query (T, d_q), key (S, d_k), W (h, d_q + d_k), v (h,))`` -> scores (T, S)."""
    generator = _generator(0)
    n_queries, n_keys, query_dim, key_dim, hidden = 3, 5, 6, 4, 7
    query = torch.randn(n_queries, query_dim, generator=generator)  # (T, d_q)
    key = torch.randn(n_keys, key_dim, generator=generator)  # (S, d_k)
    W = torch.randn(hidden, query_dim + key_dim, generator=generator)  # (h, d_q + d_k)
    v = torch.randn(hidden, generator=generator)  # (h,)
    call = "concat_scores(query (3, 6), key (5, 4), W (7, 10), v (7,))"
    result = _as_tensor(_call(fn, call, query, key, W, v), call, "a tensor of scores")
    W_q, W_k = W[:, :query_dim], W[:, query_dim:]  # (h, d_q), (h, d_k)
    expected = torch.tanh((query @ W_q.T)[:, None, :] + (key @ W_k.T)[None, :, :]) @ v  # (T, S)
    if tuple(result.shape) == (n_keys, n_queries):
        _fail(
            f"{call} returned shape {tuple(result.shape)}: rows and columns are swapped, "
            f"expected (T, S) = ({n_queries}, {n_keys}), one row per query"
        )
    if tuple(result.shape) != (n_queries, n_keys):
        _fail(f"{call} returned shape {tuple(result.shape)}, expected (T, S) = (3, 5)")
    if _close(result, expected, atol=1e-5):
        _succeed("the concat score v^T tanh(W [q; k]) is the additive score with W = [W_q, W_k]")
        return
    key_first = (
        torch.tanh((key @ W[:, :key_dim].T)[None, :, :] + (query @ W[:, key_dim:].T)[:, None, :])
        @ v
    )  # (T, S): the mistake of stacking [k; q]
    if _close(result, key_first, atol=1e-5):
        _fail(f"{call}: the pairs are stacked as [k; q]; put the query first, [q; k]")
    no_tanh = ((query @ W_q.T)[:, None, :] + (key @ W_k.T)[None, :, :]) @ v  # (T, S)
    if _close(result, no_tanh, atol=1e-5):
        _fail(f"{call}: the tanh is missing: apply it to W [q; k] before the product with v")
    difference = (result - expected).abs().max().item()
    _fail(
        f"{call}: the scores differ from v^T tanh(W [q; k]) by up to {difference:.3g}. Stack "
        f"each query in front of each key ([q; k], query first), multiply by W, take tanh, then v"
    )


# Chapter 2: the scale that gives scores of variance 1 when q and k have variance sigma^2.


@_checker
def check_scale_for(fn: Callable[[int, float], float]) -> None:
    """``fn(d, sigma)``: the factor that gives q . k variance 1 when q, k have variance sigma^2."""
    for width, sigma in [(16, 0.5), (64, 1.0), (256, 3.0), (2, 2.0)]:
        call = f"scale_for({width}, {sigma})"
        answer = _call(fn, call, width, sigma)
        if torch.is_tensor(answer) and answer.numel() == 1:
            answer = answer.item()
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            _fail(f"{call} should return a number, got {answer!r}")
        expected = 1.0 / (sigma**2 * math.sqrt(width))
        if math.isclose(answer, expected, rel_tol=1e-6):
            continue
        variance = (answer * sigma**2) ** 2 * width  # of the scaled score, exactly
        hint = ""
        if math.isclose(answer, 1.0 / (sigma * math.sqrt(width)), rel_tol=1e-6):
            hint = ": each product q_i k_i has variance sigma^4, not sigma^2"
        elif math.isclose(answer, 1.0 / math.sqrt(width), rel_tol=1e-6):
            hint = ": that is the unit-variance scale; sigma changes the variance too"
        _fail(
            f"{call} returned {answer:.4g}, which gives the scaled scores variance "
            f"{variance:.4g} instead of 1{hint}"
        )
    _succeed("q . k has variance d sigma^4, so the scale is 1 / (sigma^2 sqrt(d))")
