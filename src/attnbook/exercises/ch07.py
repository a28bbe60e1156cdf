"""Chapter 7's exercise checkers: ALiBi slopes for any number of heads; RoPE in the halves layout
(feature i paired with feature i + dim/2).
"""

from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.core.positions import alibi_slopes, apply_rope
from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)

# Chapter 7: ALiBi slopes for any number of heads.


def _alibi_hint(n_heads: int, values: Tensor) -> str:
    geometric = torch.tensor([2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)])
    if n_heads & (n_heads - 1) and _close(values, geometric, atol=1e-9):
        return (
            "2^(-8/n), 2^(-16/n), ... is the rule for a power of two only; for other n take "
            "the slopes of the largest power of two n' below n, then every other slope of 2n' "
            "heads (the 1st, 3rd, ...)"
        )
    if _close(values[:1], torch.ones(1), atol=1e-9):
        return "the first slope is 2^(-8/n) (1/2 for 8 heads), not 1"
    if n_heads & (n_heads - 1):
        return (
            "for n not a power of two: first the n' slopes of the largest power of two n' "
            "below n, in their order, then the 1st, 3rd, 5th, ... slopes of 2n' heads "
            "(slots 0, 2, 4, ...) until there are n"
        )
    return "for n a power of two the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8)"


@_checker
def check_alibi_slopes(fn: Callable[[int], Tensor]) -> None:
    """``fn(n_heads)`` -> the ALiBi slope of every head (Press et al.), any number of heads."""
    for n_heads in (8, 4, 1, 16, 6, 12):
        call = f"alibi_slopes({n_heads})"
        result = _call(fn, call, n_heads)
        try:
            values = torch.as_tensor(result, dtype=torch.float64).flatten()  # (H,)
        except (TypeError, ValueError, RuntimeError):
            _fail(f"{call} should return {n_heads} numbers, got {type(result).__name__}")
        if values.numel() != n_heads:
            _fail(f"{call} should return one slope per head, {n_heads}, got {values.numel()}")
        expected = alibi_slopes(n_heads)  # (H,)
        if not _close(values, expected, atol=1e-9, rtol=1e-6):
            _fail(
                f"{call} returned {[round(v, 5) for v in values.tolist()]}, expected "
                f"{[round(v, 5) for v in expected.tolist()]}: {_alibi_hint(n_heads, values)}"
            )
    _succeed("the slopes follow the paper for powers of two and for the heads in between")


# Chapter 7: RoPE in the halves layout (feature i paired with feature i + dim/2).


@_checker
def check_rope_halves(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(x (..., T, dim), positions (T,))`` rotates feature i with i + dim/2 by position."""
    x = torch.randn(2, 3, 5, 8, generator=_generator(7))  # (B, H, T, dim)
    positions = torch.tensor([0, 1, 2, 9, 40])  # (T,)
    call = "rope_halves(x (2, 3, 5, 8), positions [0, 1, 2, 9, 40])"
    result = _as_tensor(_call(fn, call, x.clone(), positions), call, "a tensor")
    if tuple(result.shape) != tuple(x.shape):
        _fail(f"{call} should keep the shape (2, 3, 5, 8), got {tuple(result.shape)}")
    if not _close(result.norm(dim=-1), x.norm(dim=-1), atol=1e-4):
        _fail(f"{call} changes the vectors' lengths: each pair must be rotated, not scaled")
    if _close(result, apply_rope(x, positions, layout="adjacent"), atol=1e-5):
        _fail(f"{call} rotates adjacent pairs (2i, 2i + 1); pair feature i with i + dim/2")
    if not _close(result, apply_rope(x, positions, layout="halves"), atol=1e-5):
        _fail(
            f"{call} differs from the halves layout: split x into first and second halves, "
            "turn (first, second) -> (first cos - second sin, first sin + second cos) with "
            "angle position * 10000^(-2i / dim) for feature i of each half"
        )
    _succeed("feature i is rotated with feature i + dim/2 by its position's angle")
