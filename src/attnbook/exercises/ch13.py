"""Chapter 13's exercise checkers: what trained heads learn."""

import math
import statistics
from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnbook.analysis.head_analysis import gradient_importance, supported_orderings
from attnbook.core.masks import causal_mask
from attnbook.exercises._common import (
    ExerciseError,
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
    if abs(value - weights.diagonal(offset=-1).sum().item()) < 1e-6:
        _fail(f"{call}: that is the sum of weights[i, i - 1]; average it over the T - 1 queries")
    if abs(value) < 1e-6:
        _fail(
            f"{call} returned 0: key i + 1 is in query i's future, so a causal head puts "
            f"nothing there; the previous character is key i - 1, below the diagonal"
        )
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
    try:
        answer = _call(fn, call, model, inputs, targets)
    except ExerciseError as error:
        if "head_mask: expected dtype" in str(error.__cause__):
            _fail(
                f"{call}: the gates must have the model's dtype (this check's model is float64, "
                f"the chapter's float32): make them with dtype=next(model.parameters()).dtype"
            )
        raise
    result = _as_tensor(answer, call, "an (L, H) tensor")
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
            f"{call}: that is |d (mean loss over the batch) / d xi|: take |.| of each "
            f"window's own gradient before the mean, so gradients of opposite signs do not cancel"
        )
    if _close(result.detach(), batch_gradient, atol=1e-8):
        _fail(f"{call}: the importance is an absolute value, per window, then averaged")
    if _close(result.detach(), expected * len(inputs), atol=1e-8):
        _fail(
            f"{call} is {len(inputs)} times too large: that is the sum over the {len(inputs)} "
            f"windows; the importance is the mean, E_x"
        )
    if _close(result.detach(), expected * inputs.size(1), atol=1e-8):
        _fail(
            f"{call} is {inputs.size(1)} times too large: a window's loss is its MEAN "
            f"cross-entropy over its {inputs.size(1)} positions, not the sum"
        )
    _fail(f"{call} differs from E_x |d loss(x) / d xi| at xi = 1 (all gates 1)")


_ORDERING_CASES = [  # dict H -> per-seed losses; each mistake below gives other answers
    {1: [1.0, 1.1, 1.2], 2: [1.21, 1.31, 1.41], 4: [1.3, 1.4, 1.5]},
    {8: [2.0, 2.02, 2.04, 2.06], 1: [2.6, 2.9, 2.75], 2: [2.05, 2.35, 2.2]},
    {2: [1.0, 1.2], 4: [1.24, 1.44]},  # two seeds: means 1.2 standard errors apart
    {1: [1.0, 1.1, 1.2], 4: [1.25, 1.35, 1.45]},  # apart with s / sqrt(n), not s / sqrt(n - 1)
    {2: [1.5, 1.5], 4: [1.5, 1.5], 8: [1.0, 1.2]},  # 2 and 4 touch exactly: unranked
    {1: [1.0, 1.1, 1.2], 2: [1.2286, 1.3286, 1.4286]},  # apart at 1.96 se, not at 2 se
]


def _separated(
    losses: dict, half_width: Callable[[list[float]], float], strict: bool = True
) -> set[tuple]:
    """Pairs (a, b) with mean_a + half_width_a < mean_b - half_width_b (<= if not strict)."""
    upper = {k: statistics.fmean(v) + half_width(v) for k, v in losses.items()}
    lower = {k: statistics.fmean(v) - half_width(v) for k, v in losses.items()}
    below = (lambda x, y: x < y) if strict else (lambda x, y: x <= y)
    return {(a, b) for a in losses for b in losses if a != b and below(upper[a], lower[b])}


_ORDERING_MISTAKES = [  # what each typical mistake answers, and what is wrong with it
    (
        lambda losses: {(b, a) for a, b in supported_orderings(losses)},
        "the pairs are reversed: (a, b) means H = a has the LOWER loss",
    ),
    (
        lambda losses: _separated(losses, lambda v: 0.0),
        "that ranks by the means alone; a difference counts only when the intervals "
        "mean +- 2 standard errors do not overlap",
    ),
    (
        lambda losses: _separated(losses, lambda v: 2 * statistics.pstdev(v) / math.sqrt(len(v))),
        "that uses the population standard deviation (divide by n); the sample one divides "
        "by n - 1, which matters with 2 to 4 seeds",
    ),
    (
        lambda losses: _separated(losses, lambda v: 2 * statistics.stdev(v)),
        "that uses +- 2 standard deviations; the rule uses standard errors, std / sqrt(n)",
    ),
    (
        lambda losses: _separated(losses, lambda v: 1.96 * statistics.stdev(v) / math.sqrt(len(v))),
        "that uses +- 1.96 standard errors; the rule's intervals are mean +- 2 standard errors",
    ),
    (
        lambda losses: _separated(losses, lambda v: statistics.stdev(v) / math.sqrt(len(v))),
        "that uses +- 1 standard error; the rule's intervals are mean +- 2 standard errors",
    ),
    (
        lambda losses: _separated(
            losses, lambda v: 2 * statistics.stdev(v) / math.sqrt(len(v) - 1)
        ),
        "that divides by sqrt(n - 1); the standard error is the sample standard deviation "
        "(which already divides by n - 1 inside) over sqrt(n)",
    ),
    (
        lambda losses: _separated(
            losses, lambda v: 2 * statistics.stdev(v) / math.sqrt(len(v)), False
        ),
        "that ranks intervals that only touch; the rule is strict (<), so touching "
        "intervals stay unranked",
    ),
]


@_checker
def check_supported_orderings(fn: Callable[[dict], set]) -> None:
    """``fn(losses)``, losses a dict H -> per-seed losses: the pairs (a, b), a lower beyond spread.

    The rule: mean_a + 2 se_a < mean_b - 2 se_b, se the sample standard deviation over sqrt(n).
    A wrong answer is named by the mistake that gives its answers on every case.
    """
    results = []
    for losses in _ORDERING_CASES:
        call = f"supported_orderings({losses})"
        answer = _call(fn, call, {k: list(v) for k, v in losses.items()})
        try:
            results.append({tuple(pair) for pair in answer})
        except TypeError:
            _fail(f"{call} should return a set of pairs (a, b), got {type(answer).__name__}")
    expected = [supported_orderings(losses) for losses in _ORDERING_CASES]
    if results == expected:
        _succeed("a pair is ranked only when the intervals mean +- 2 standard errors are apart")
        return
    case = next(i for i in range(len(results)) if results[i] != expected[i])
    call = f"supported_orderings({_ORDERING_CASES[case]})"
    for mistake, explanation in _ORDERING_MISTAKES:
        if results == [mistake(losses) for losses in _ORDERING_CASES]:
            _fail(f"{call} returned {sorted(results[case])}: {explanation}")
    _fail(
        f"{call} returned {sorted(results[case])}, expected {sorted(expected[case])}: a pair "
        f"(a, b) belongs in the set when mean_a + 2 se_a < mean_b - 2 se_b"
    )


def _layer_zero_offsets(model: TinyDecoder, tokens: Tensor) -> dict[str, Tensor]:
    """Layer 0's mean weight per head on keys i, i - 1 and i - 2, each over the queries that
    have such a key, with the slips a learner might make: each an (H,) tensor."""
    with torch.no_grad():
        weights = model.attention_weights(tokens)  # (L, B, H, T, T)

    def mean_on(layer: int, offset: int, skip: bool = True) -> Tensor:
        diagonal = weights[layer].diagonal(offset=-offset, dim1=-2, dim2=-1)  # (B, H, T - k)
        if skip:
            return diagonal.mean(dim=(0, 2))  # (H,)
        return diagonal.sum(dim=(0, 2)) / (weights.size(1) * weights.size(-1))  # (H,)

    # (B, H, T - 1) and (B, H, T - 2): layer 0's weights on keys i - 1 and i - 2
    previous, two_back = (weights[0].diagonal(offset=-k, dim1=-2, dim2=-1) for k in (1, 2))
    return {
        "previous": mean_on(0, 1),
        "two_back": mean_on(0, 2),
        "current": mean_on(0, 0),
        "previous_all_queries": mean_on(0, 1, skip=False),
        "two_back_all_queries": mean_on(0, 2, skip=False),
        "last_layer": mean_on(-1, 1),
        # the T - 2 weights two back divided by the T - 1 queries that have a previous key
        "two_back_over_previous_count": two_back.sum(dim=(0, 2))
        / (weights.size(1) * previous.size(-1)),
        # each window's ratio, then their mean: not the ratio of the two means
        "mean_of_window_ratios": (previous.mean(dim=-1) / two_back.mean(dim=-1)).mean(dim=0),
    }


@_checker
def check_previous_shares(fn: Callable[[nn.Module, Tensor], tuple[Tensor, Tensor]]) -> None:
    """``fn(model, tokens (B, T))`` -> (shares, ratios), two (H,) tensors for layer 0: the mean
    weight on key i - 1 (queries 1 .. T - 1) and that share over the weight on key i - 2
    (queries 2 .. T - 1), both averaged over every window."""
    model, tokens, _ = _gated_model()
    call = "previous_shares(model, tokens (4, 6))"
    answer = _call(fn, call, model, tokens.clone())
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        _fail(f"{call} should return two (H,) tensors, (shares, ratios)")
    shares, ratios = (_as_tensor(part, call, "two (H,) tensors") for part in answer)
    for name, part in (("shares", shares), ("ratios", ratios)):
        if tuple(part.shape) != (2,):
            _fail(f"{call}: {name} should have shape (H,) = (2,), got {tuple(part.shape)}")
    keys = _layer_zero_offsets(model, tokens)
    shares, ratios = shares.detach(), ratios.detach()
    if _close(shares, keys["last_layer"], atol=1e-6):
        _fail(f"{call}: those are the last layer's shares; the question is about layer 0")
    if _close(shares, keys["previous_all_queries"], atol=1e-6):
        _fail(f"{call}: query 0 has no previous character; average over queries 1 to T - 1")
    if _close(shares, keys["current"], atol=1e-6):
        _fail(f"{call}: that is the weight on key i itself; the previous character is key i - 1")
    if _close(shares, keys["previous"] * tokens.size(0), atol=1e-6):
        _fail(f"{call}: the shares are {tokens.size(0)} times too large: average over windows")
    if not _close(shares, keys["previous"], atol=1e-6):
        _fail(f"{call}: shares should be the mean of layer 0's weights[i, i - 1], per head")
    if _close(ratios, keys["two_back"] / keys["previous"], atol=1e-6):
        _fail(f"{call}: the ratio is upside down: the previous share over the two-back one")
    if _close(ratios, keys["previous"] / keys["current"], atol=1e-6):
        _fail(f"{call}: the ratio compares key i - 1 with key i - 2 (two back), not key i")
    if _close(ratios, keys["previous"] / keys["two_back_all_queries"], atol=1e-6):
        _fail(f"{call}: queries 0 and 1 have no key two back; average over queries 2 to T - 1")
    if _close(ratios, keys["previous"] / keys["two_back_over_previous_count"], atol=1e-6):
        _fail(
            f"{call}: the two-back weight is averaged over T - 1 queries; only the T - 2 "
            f"queries 2 .. T - 1 have a key two back, so divide by T - 2"
        )
    if _close(ratios, keys["mean_of_window_ratios"], atol=1e-6):
        _fail(
            f"{call}: that is the mean of the per-window ratios; take the ratio of the two "
            f"means instead (the mean share over the mean weight two back, every window pooled)"
        )
    if not _close(ratios, keys["previous"] / keys["two_back"], atol=1e-6):
        _fail(f"{call}: ratios should be each share over the head's mean weight on key i - 2")
    _succeed("layer 0's shares on key i - 1, and each against its weight on key i - 2")
