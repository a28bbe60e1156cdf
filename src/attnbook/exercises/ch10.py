"""Chapter 10's exercise checkers: merging two partial attention results."""

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

# Chapter 10: merging two partial attention results.


def _split_attention(seed: int) -> tuple[Tensor, ...]:
    """Partial results of 3 queries over keys 0-4 and 5-9, and the full attention over 0-9."""
    generator = _generator(seed)
    query = torch.randn(2, 3, 4, generator=generator)  # (B, T, d)
    key = torch.randn(2, 10, 4, generator=generator) * 2  # (B, S, d)
    value = torch.randn(2, 10, 5, generator=generator)  # (B, S, d_v)
    scores = query @ key.transpose(-2, -1)  # (B, T, S)
    parts = []
    for keys in (slice(0, 5), slice(5, 10)):
        part_scores = scores[..., keys]  # (B, T, 5)
        parts.append(torch.softmax(part_scores, dim=-1) @ value[..., keys, :])  # (B, T, d_v)
        parts.append(torch.logsumexp(part_scores, dim=-1, keepdim=True))  # (B, T, 1)
    full = torch.softmax(scores, dim=-1) @ value  # (B, T, d_v)
    return (*parts, full, torch.logsumexp(scores, dim=-1, keepdim=True))


@_checker
def check_merge_partials(fn: Callable[[Tensor, Tensor, Tensor, Tensor], tuple]) -> None:
    """``fn(out_a, lse_a, out_b, lse_b)`` -> (out, lse) of the attention over both key sets."""
    out_a, lse_a, out_b, lse_b, full, full_lse = _split_attention(0)
    call = "merge(out_a (2, 3, 5), lse_a (2, 3, 1), out_b, lse_b)"
    result = _call(fn, call, out_a, lse_a, out_b, lse_b)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail(f"{call} should return a pair (output, lse), got {type(result).__name__}")
    output = _as_tensor(result[0], call, "an output tensor first")
    lse = _as_tensor(result[1], call, "an lse tensor second")
    if tuple(output.shape) != (2, 3, 5) or tuple(lse.shape) != (2, 3, 1):
        _fail(
            f"{call} should return shapes (2, 3, 5) and (2, 3, 1), got "
            f"{tuple(output.shape)} and {tuple(lse.shape)}"
        )
    if _close(output, (out_a + out_b) / 2, atol=1e-5):
        _fail(
            f"{call} averaged the two outputs: weight each by its share of the joint "
            f"normaliser, exp(lse_a - lse) and exp(lse_b - lse)"
        )
    if not _close(lse, full_lse, atol=1e-5):
        _fail(f"{call}: the lse should be log(exp(lse_a) + exp(lse_b)), computed stably")
    if not _close(output, full, atol=1e-5):
        _fail(f"{call}: the output differs from the attention over all 10 keys")
    empty = torch.full((1, 1, 1), float("-inf"))  # a row with no key on either side
    zeros = torch.zeros(1, 1, 5)
    call = "merge(zeros, -inf, zeros, -inf)"
    output, lse = _call(fn, call, zeros, empty, zeros, empty)
    if not torch.isfinite(output).all() or output.abs().sum() != 0:
        _fail(
            f"{call} gave {output.flatten().tolist()}: a row with no keys on either side must "
            f"stay 0 (lse -inf), not NaN; replace a maximum of -inf by 0 before subtracting"
        )
    _succeed("each partial output is weighted by exp(its lse - the joint lse)")
