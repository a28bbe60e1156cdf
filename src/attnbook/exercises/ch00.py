"""Chapter 0's exercise checkers: a sliding-window mask and the query magnitude for a weight."""

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.core.masks import causal_mask
from attnbook.exercises._common import (
    _call,
    _check_bool_mask,
    _checker,
    _fail,
    _first_difference,
    _succeed,
)

# Chapter 0: a sliding-window mask.


@_checker
def check_window_mask(fn: Callable[[int, int], Tensor]) -> None:
    """``fn(T, width)``: the (T, T) mask where query t sees keys t - width + 1 to t."""
    for length, width in [(6, 2), (5, 1), (7, 3), (4, 4), (3, 5)]:
        call = f"window_mask({length}, {width})"
        mask = _check_bool_mask(_call(fn, call, length, width), call, (length, length))
        too_far = torch.ones(length, length, dtype=torch.bool).tril(diagonal=-width)
        expected = causal_mask(length) & ~too_far
        if torch.equal(mask, expected):
            continue
        row, key = _first_difference(mask, expected)
        if mask[row, key] and key > row:
            _fail(f"{call}: row {row} may attend to key {key}, which is in its future")
        if mask[row, key]:
            _fail(
                f"{call}: row {row} may attend to key {key}, {row - key} steps back: a window "
                f"of {width} holds only the token itself and the {width - 1} before it"
            )
        _fail(
            f"{call}: row {row} may not attend to key {key}, but key {key} is inside its window "
            f"of {width} (keys {max(0, row - width + 1)} to {row})"
        )
    _succeed("each query sees itself and the width - 1 tokens just before it, nothing later")


# Chapter 0: how large a query gives a chosen weight.

# (target weight, n_keys, d): a one-hot query times the answer, against n_keys one-hot keys
_MAGNITUDE_CASES = [(0.9, 6, 8), (0.5, 6, 8), (0.99, 100, 64), (0.3, 4, 16), (0.6, 2, 1)]


def _magnitude(target: float, n_keys: int, d: int) -> float:
    return math.sqrt(d) * math.log(target * (n_keys - 1) / (1 - target))


def _magnitude_slip(answers: list[float]) -> str:
    """Name the slip every answer shares, if it is one of the usual ones."""
    slips = {
        "the score q . k / sqrt(d) is the answer divided by sqrt(d); you returned the score, "
        "multiply it by sqrt(d)": lambda t, n, d: _magnitude(t, n, d) / math.sqrt(d),
        "the scale is 1 / sqrt(d), not 1 / d: undo it with sqrt(d)": lambda t, n, d: (
            _magnitude(t, n, d) * math.sqrt(d)
        ),
        "the target competes with the n_keys - 1 other keys, not with n_keys of them": (
            lambda t, n, d: math.sqrt(d) * math.log(t * n / (1 - t))
        ),
        "each of the n_keys - 1 other keys adds e^0 = 1 to the softmax's denominator": (
            lambda t, n, d: math.sqrt(d) * math.log(t / (1 - t))
        ),
    }
    for hint, slip in slips.items():
        if all(
            math.isclose(a, slip(*case), rel_tol=1e-4)
            for a, case in zip(answers, _MAGNITUDE_CASES, strict=True)
        ):
            return f" ({hint})"
    return ""


@_checker
def check_query_magnitude(fn: Callable[[float, int, int], float]) -> None:
    """``fn(target, n_keys, d)``: the a for which a * one-hot gets weight ``target``."""
    answers = []
    for target, n_keys, d in _MAGNITUDE_CASES:
        call = f"query_magnitude({target}, {n_keys}, {d})"
        answer = _call(fn, call, target, n_keys, d)
        if torch.is_tensor(answer) and answer.numel() == 1:
            answer = answer.item()
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            _fail(f"{call} should return a number, got {answer!r}")
        answers.append(float(answer))
    for (target, n_keys, d), answer in zip(_MAGNITUDE_CASES, answers, strict=True):
        # the weight this magnitude really gives: one score a / sqrt(d), n_keys - 1 zeros
        scores = torch.zeros(n_keys, dtype=torch.float64)
        scores[0] = answer / math.sqrt(d)
        weight = scores.softmax(-1)[0].item()
        if not math.isclose(weight, target, rel_tol=1e-6):
            _fail(
                f"query_magnitude({target}, {n_keys}, {d}) returned {answer:.4g}, which gives "
                f"the key the weight {weight:.4g} instead of {target}{_magnitude_slip(answers)}"
            )
    _succeed(
        "e^s / (e^s + n_keys - 1) = target gives s = log(target (n_keys - 1) / (1 - target)), "
        "and the query's magnitude is s sqrt(d)"
    )
