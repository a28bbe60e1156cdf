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
                f"{call}: row {row} ({who}) may attend to key {key}, a generated token in its "
                f"future"
            )
        if key < prompt:
            _fail(
                f"{call}: row {row} ({who}) may not attend to key {key}, which is in the prompt: "
                f"every token sees the whole prompt"
            )
        _fail(
            f"{call}: row {row} ({who}) may not attend to key {key}, an earlier generated "
            f"token: generated tokens see everything up to themselves"
        )
    _succeed("the prompt is read both ways and the rest is causal")
