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


_SCALE_CASES = [(16, 0.5), (64, 1.0), (256, 3.0), (2, 2.0)]
# likely slips, each with what it gets wrong; one is named only if it matches every case, since
# two slips can agree on one case (at d = 16, sigma = 0.5 both give 1/4)
_SCALE_SLIPS = (
    (
        lambda d, sigma: 1.0 / (sigma * math.sqrt(d)),
        "each product q_i k_i has variance sigma^4, not sigma^2",
    ),
    (
        lambda d, sigma: 1.0 / (sigma**2 * d),
        "the square root applies to d as well: q . k has standard deviation "
        "sqrt(d sigma^4) = sigma^2 sqrt(d)",
    ),
    (
        lambda d, sigma: 1.0 / math.sqrt(d),
        "that is the unit-variance scale; sigma changes the variance too",
    ),
)


def _scale_slip(answers: list[float]) -> str:
    """The hint for a known slip that gives every one of ``answers``, or ''."""
    for slip, words in _SCALE_SLIPS:
        cases = zip(_SCALE_CASES, answers, strict=True)
        if all(math.isclose(a, slip(d, sigma), rel_tol=1e-6) for (d, sigma), a in cases):
            return f": {words}"
    return ""


@_checker
def check_scale_for(fn: Callable[[int, float], float]) -> None:
    """``fn(d, sigma)``: the factor that gives q . k variance 1 when q, k have variance sigma^2."""
    answers = []
    for width, sigma in _SCALE_CASES:
        call = f"scale_for({width}, {sigma})"
        answer = _call(fn, call, width, sigma)
        if torch.is_tensor(answer) and answer.numel() == 1:
            answer = answer.item()
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            _fail(f"{call} should return a number, got {answer!r}")
        answers.append(answer)
    for (width, sigma), answer in zip(_SCALE_CASES, answers, strict=True):
        if math.isclose(answer, 1.0 / (sigma**2 * math.sqrt(width)), rel_tol=1e-6):
            continue
        variance = (answer * sigma**2) ** 2 * width  # of the scaled score, exactly
        _fail(
            f"scale_for({width}, {sigma}) returned {answer:.4g}, which gives the scaled scores "
            f"variance {variance:.4g} instead of 1{_scale_slip(answers)}"
        )
    _succeed("q . k has variance d sigma^4, so the scale is 1 / (sigma^2 sqrt(d))")
