"""Chapter 13's exercise checkers: what trained heads learn."""

import math
import statistics
from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnbook.analysis.head_analysis import gradient_importance, supported_orderings
from attnbook.core.masks import causal_mask
from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)
from attnbook.models.decoder import TinyDecoder

# Chapter 13: what trained heads learn.


@_checker
def check_previous_share(fn: Callable[[Tensor], float]) -> None:
    """``fn(weights (T, T))`` -> mean weight on key i - 1 over the queries i = 1 .. T - 1."""
    generator = _generator(0)
    scores = torch.randn(6, 6, generator=generator)  # (T, S)
    weights = scores.masked_fill(~causal_mask(6), float("-inf")).softmax(dim=-1)  # (T, S)
    expected = weights.diagonal(offset=-1).mean().item()
    call = "previous_share(weights (6, 6))"
    answer = _call(fn, call, weights.clone())
    value = answer.item() if torch.is_tensor(answer) and answer.numel() == 1 else answer
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(f"{call} should return one number, got {type(answer).__name__}")
    if abs(value - expected) < 1e-6:
        _succeed("the previous-character share averages weights[i, i - 1] over queries 1..T-1")
        return
    with_first = torch.cat([torch.zeros(1), weights.diagonal(offset=-1)]).mean().item()
    if abs(value - with_first) < 1e-6:
        _fail(f"{call}: query 0 has no previous character; average over queries 1 to T - 1")
    if abs(value - weights.diagonal().mean().item()) < 1e-6:
        _fail(f"{call}: that is the weight on key i itself; the previous character is key i - 1")
    _fail(f"{call} returned {value:.4f}, expected {expected:.4f}: the mean of weights[i, i - 1]")


def _gated_model() -> tuple[TinyDecoder, Tensor, Tensor]:
    torch.manual_seed(0)
    model = TinyDecoder(7, d_model=8, n_heads=2, n_layers=2, max_len=6).double().eval()
    tokens = torch.randint(0, 7, (4, 7), generator=_generator(0))  # (B, T + 1)
    return model, tokens[:, :-1], tokens[:, 1:]


@_checker
def check_head_importance(fn: Callable[[nn.Module, Tensor, Tensor], Tensor]) -> None:
    """``fn(model, inputs (B, T), targets (B, T))`` -> (L, H): E_x |d loss(x) / d xi| at xi = 1."""
    model, inputs, targets = _gated_model()
    call = "head_importance(model, inputs (4, 6), targets (4, 6))"
    result = _as_tensor(_call(fn, call, model, inputs, targets), call, "an (L, H) tensor")
    if tuple(result.shape) != (2, 2):
        _fail(f"{call} should return shape (L, H) = (2, 2), got {tuple(result.shape)}")
    expected = gradient_importance(model, inputs, targets)  # (L, H)
    if _close(result.detach(), expected, atol=1e-8):
        _succeed("I_h averages |d loss / d xi_h| over windows, the absolute value taken first")
        return
    gates = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    logits = model(inputs, head_mask=gates)  # (B, T, V)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    (batch_gradient,) = torch.autograd.grad(loss, gates)  # (L, H)
    if _close(result.detach(), batch_gradient.abs(), atol=1e-8):
        _fail(
            f"{call}: that is |d (mean loss over the batch) / d xi|: take one window at a time "
            f"and average the absolute values, so gradients of opposite signs do not cancel"
        )
    if _close(result.detach(), batch_gradient, atol=1e-8):
        _fail(f"{call}: the importance is an absolute value, per window, then averaged")
    _fail(f"{call} differs from E_x |d loss(x) / d xi| at xi = 1 (all gates 1)")


_ORDERING_CASES = [  # dict H -> per-seed losses; each mistake below gives a different answer
    {1: [1.0, 1.1, 1.2], 2: [1.21, 1.31, 1.41], 4: [1.3, 1.4, 1.5]},
    {8: [2.0, 2.02, 2.04, 2.06], 1: [2.6, 2.9, 2.75], 2: [2.05, 2.35, 2.2]},
]


def _separated(losses: dict, half_width: Callable[[list[float]], float]) -> set[tuple]:
    """Pairs (a, b) with mean_a + half_width_a < mean_b - half_width_b."""
    upper = {k: statistics.fmean(v) + half_width(v) for k, v in losses.items()}
    lower = {k: statistics.fmean(v) - half_width(v) for k, v in losses.items()}
    return {(a, b) for a in losses for b in losses if a != b and upper[a] < lower[b]}


def _ordering_mistakes(losses: dict) -> list[tuple[set, str]]:
    """The answers of typical mistakes, each with what is wrong."""
    means = {k: statistics.fmean(v) for k, v in losses.items()}
    expected = supported_orderings(losses)
    return [
        (
            {(b, a) for a, b in expected},
            "the pairs are reversed: (a, b) means H = a has the LOWER loss",
        ),
        (
            {(a, b) for a in means for b in means if means[a] < means[b]},
            "that ranks by the means alone; a difference counts only when the intervals "
            "mean +- 2 standard errors do not overlap",
        ),
        (
            _separated(losses, lambda v: 2 * statistics.pstdev(v) / math.sqrt(len(v))),
            "that uses the population standard deviation (divide by n); the sample one divides "
            "by n - 1, which matters with 3 seeds",
        ),
        (
            _separated(losses, lambda v: 2 * statistics.stdev(v)),
            "that uses +- 2 standard deviations; the rule uses standard errors, std / sqrt(n)",
        ),
    ]


@_checker
def check_supported_orderings(fn: Callable[[dict], set]) -> None:
    """``fn(losses)``, losses a dict H -> per-seed losses: the pairs (a, b), a lower beyond spread.

    The rule: mean_a + 2 se_a < mean_b - 2 se_b, se the sample standard deviation over sqrt(n).
    """
    for losses in _ORDERING_CASES:
        call = f"supported_orderings({losses})"
        answer = _call(fn, call, {k: list(v) for k, v in losses.items()})
        try:
            result = {tuple(pair) for pair in answer}
        except TypeError:
            _fail(f"{call} should return a set of pairs (a, b), got {type(answer).__name__}")
        expected = supported_orderings(losses)
        if result == expected:
            continue
        for mistake, explanation in _ordering_mistakes(losses):
            if result == mistake:
                _fail(f"{call} returned {sorted(result)}: {explanation}")
        _fail(
            f"{call} returned {sorted(result)}, expected {sorted(expected)}: a pair (a, b) "
            f"belongs in the set when mean_a + 2 se_a < mean_b - 2 se_b"
        )
    _succeed("a pair is ranked only when the intervals mean +- 2 standard errors are apart")
