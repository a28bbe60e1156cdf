"""Chapter 3's exercise checkers: a memory budget for the score tensor, self-attention with no
queries, and a test of permutation equivariance."""

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

# Chapter 3: how long a sequence's score tensor may be for a memory budget.


@_checker
def check_largest_length(fn: Callable[[int, int, int], int]) -> None:
    """``fn(budget_bytes, n_heads, bytes_per_score)``: the largest T whose (1, H, T, T) fits."""
    # the last budget is one byte short of a square beyond float precision: int(math.sqrt(...))
    # rounds up to the square's root there, math.isqrt does not
    cases = [(2**30, 8, 4), (2**20, 1, 2), (10**6, 3, 4), (100, 1, 4), (94906267**2 - 1, 1, 1)]
    for budget, n_heads, size in cases:
        call = f"largest_length({budget}, {n_heads}, {size})"
        answer = _call(fn, call, budget, n_heads, size)
        if isinstance(answer, bool) or not isinstance(answer, int):
            _fail(f"{call} should return a whole number of tokens (int), got {answer!r}")

        def needed(length: int, n_heads: int = n_heads, size: int = size) -> int:
            return n_heads * length * length * size

        if needed(answer) > budget:
            _fail(
                f"{call} returned {answer}, but {n_heads} x {answer} x {answer} scores of "
                f"{size} bytes need {needed(answer):,} bytes, more than the {budget:,} budgeted"
            )
        if needed(answer + 1) <= budget:
            _fail(
                f"{call} returned {answer}, but T = {answer + 1} fits too: it needs "
                f"{needed(answer + 1):,} of the {budget:,} bytes"
            )
    _succeed("the score tensor grows as H T^2, so T is the square root of budget / (H x bytes)")


# Chapter 3: what self-attention outputs when every query is zero.


def _attend(x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> Tensor:
    """Single-head self-attention of x (B, T, D): the output (B, T, d_head)."""
    q, k, v = x @ W_q, x @ W_k, x @ W_v  # (B, T, d_head) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, T, S)
    return scores.softmax(dim=-1) @ v  # (B, T, d_head)


@_checker
def check_zero_query_output(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(x, W_v)``: the output of self-attention with W_q = 0, for x (B, T, D)."""
    generator = _generator(3)
    B, T, D, d_head = 2, 5, 6, 3
    x = torch.randn(B, T, D, generator=generator, dtype=torch.float64)  # (B, T, D)
    W_k, W_v = (torch.randn(D, d_head, generator=generator, dtype=torch.float64) for _ in "kv")
    expected = _attend(x, torch.zeros(D, d_head, dtype=torch.float64), W_k, W_v)
    call = "zero_query_output(x, W_v) with x of shape (2, 5, 6)"
    result = _as_tensor(_call(fn, call, x, W_v), call, "a tensor")
    if tuple(result.shape) != (B, T, d_head):
        _fail(
            f"{call} returned shape {tuple(result.shape)}, expected (B, T, d_head) = "
            f"{(B, T, d_head)}: one output per token, even when all of them are equal"
        )
    values = x @ W_v  # (B, S, d_head)
    if _close(result, values, atol=1e-6):
        _fail(f"{call} returned each token's own value; with zero scores a token sees all keys")
    if _close(result, values.sum(dim=1, keepdim=True).expand(B, T, d_head), atol=1e-6):
        _fail(f"{call} returned the sum of the values; the weights sum to 1, each is 1/T")
    if not _close(result, expected, atol=1e-6):
        token = (result.double() - expected).abs().amax(dim=-1).argmax().item()
        _fail(
            f"{call}: output row {token % T} of sequence {token // T} differs from "
            "self_attention with W_q = 0 (every score is 0: what does the softmax of zeros give?)"
        )
    _succeed("zero queries give zero scores, uniform weights 1/T, and the mean of the values")


# Chapter 3: a numerical test of permutation equivariance.


def _positions_added(x: Tensor, W: list[Tensor], signal: Tensor) -> Tensor:
    return _attend(x + signal, *W)  # (B, T, d_head): positions break equivariance


@_checker
def check_is_equivariant(fn: Callable[[Callable, Tensor, Tensor], bool]) -> None:
    """``fn(attention, x, permutation)``: does attention(x[:, p]) equal attention(x)[:, p]?"""
    generator = _generator(4)
    B, T, D, d_head = 2, 5, 6, 3
    x = torch.randn(B, T, D, generator=generator)  # (B, T, D)
    W = [torch.randn(D, d_head, generator=generator) / math.sqrt(D) for _ in "qkv"]
    signal = torch.randn(T, D, generator=generator)  # (T, D): one vector per position
    cases = [
        ("self-attention", lambda x: _attend(x, *W), True),
        ("a per-token tanh", torch.tanh, True),
        ("self-attention after adding positions", lambda x: _positions_added(x, W, signal), False),
        ("a running sum over the tokens", lambda x: x.cumsum(dim=1), False),
        # the same rows in another order: catches comparing sorted values, not positions
        ("reversing the tokens", lambda x: x.flip(dims=[1]), False),
    ]
    permutation = torch.tensor([1, 2, 0, 4, 3])  # a 3-cycle and a swap: p != its inverse
    identity = torch.arange(T)
    cases.append(("a running sum over the tokens", cases[3][1], True))
    for index, (name, attention, expected) in enumerate(cases):
        order = identity if index == len(cases) - 1 else permutation
        call = f"is_equivariant({name}, x, permutation={order.tolist()})"
        answer = _as_bool(_call(fn, call, attention, x, order), call)
        if answer != expected:
            if index == len(cases) - 1:
                hint = "leaving the order as it is changes nothing"
            elif expected:
                hint = (
                    "shuffle the input, then compare with the original output shuffled by the"
                    " same permutation: attention(x[:, p]) against attention(x)[:, p], equal"
                    " up to float rounding (torch.allclose: == or torch.equal can fail on the"
                    " last digits alone)"
                )
            elif name == "reversing the tokens":
                hint = (
                    "it gives the same rows as attention(x)[:, p], but at other positions:"
                    " compare position by position, not sorted or summed values"
                )
            else:
                hint = "the outputs of the shuffled input are not a reordering of the original"
            _fail(f"{call} returned {answer}, expected {expected}: {hint}")
    _succeed("equivariant means shuffle-then-attend equals attend-then-shuffle")


def _as_bool(answer, call: str) -> bool:
    """A Python bool, or a one-element boolean tensor, as a bool."""
    if torch.is_tensor(answer) and answer.numel() == 1 and answer.dtype == torch.bool:
        return bool(answer)
    if not isinstance(answer, bool):
        _fail(f"{call} should return True or False, got {answer!r}")
    return answer
