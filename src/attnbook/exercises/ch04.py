"""Chapter 4's exercise checkers: the prefix-LM mask."""

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

# Chapter 4: the prefix-LM mask.


@_checker
def check_prefix_lm_mask(fn: Callable[[int, int], Tensor]) -> None:
    """``fn(T, P)``: the (T, T) mask of a prompt of P tokens read both ways, then causal."""
    for length, prompt in [(6, 2), (5, 0), (5, 5), (7, 3)]:
        call = f"prefix_lm_mask({length}, {prompt})"
        mask = _check_bool_mask(_call(fn, call, length, prompt), call, (length, length))
        expected = causal_mask(length) | (torch.arange(length) < prompt)
        if torch.equal(mask, expected):
            continue
        row, key = _first_difference(mask, expected)
        who = "a prompt token" if row < prompt else "a generated token"
        if mask[row, key]:
            _fail(
                f"{call}: your mask lets row {row} ({who}) attend to key {key}, a generated "
                f"token in its future; that key must be blocked"
            )
        if key < prompt:
            _fail(
                f"{call}: your mask blocks row {row} ({who}) from key {key}, which is in the "
                f"prompt; every token must see the whole prompt"
            )
        what = "its own position" if key == row else "an earlier generated token"
        _fail(
            f"{call}: your mask blocks row {row} ({who}) from key {key}, {what}; a generated "
            f"token must see every key up to and including itself"
        )
    _succeed("the prompt is read both ways and the rest is causal")
