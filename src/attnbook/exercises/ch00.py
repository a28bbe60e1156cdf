"""Chapter 0's exercise checkers: a sliding-window mask."""

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
