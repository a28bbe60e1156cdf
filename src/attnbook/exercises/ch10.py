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
    output, lse = _merge_pair(fn, call, out_a, lse_a, out_b, lse_b)
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
    _check_empty_rows(fn)
    _check_far_from_zero(fn)
    _succeed(
        "each partial output is weighted by exp(its lse - the joint lse); an empty side "
        "(lse -inf) counts for nothing, and lse values far from 0 stay finite"
    )


def _merge_pair(fn: Callable, call: str, *args: Tensor) -> tuple[Tensor, Tensor]:
    result = _call(fn, call, *args)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail(f"{call} should return a pair (output, lse), got {type(result).__name__}")
    output = _as_tensor(result[0], call, "an output tensor first")
    lse = _as_tensor(result[1], call, "an lse tensor second")
    return output, lse


def _check_empty_rows(fn: Callable) -> None:
    """No keys on either side gives 0 and lse -inf; an empty side leaves the other as it is."""
    empty = torch.full((1, 1, 1), float("-inf"))  # the lse of a row with no keys
    zeros = torch.zeros(1, 1, 5)  # (B, T, d_v)
    call = "merge(zeros, -inf, zeros, -inf)"
    output, lse = _merge_pair(fn, call, zeros, empty, zeros, empty)
    if not torch.isfinite(output).all() or output.abs().sum() != 0:
        _fail(
            f"{call} gave {output.flatten().tolist()}: a row with no keys on either side must "
            f"stay 0 (lse -inf), not NaN; replace a maximum of -inf by 0 before subtracting"
        )
    if lse.numel() != 1 or lse.item() != float("-inf"):
        _fail(
            f"{call} returned lse {lse.flatten().tolist()}: a row with no keys has lse "
            f"log(0) = -inf. Any other value counts as keys of that weight in the next merge, "
            f"which then pulls real outputs towards 0; return -inf where the total is 0"
        )
    real = torch.linspace(-1.0, 1.0, 5).view(1, 1, 5)  # (B, T, d_v)
    real_lse = torch.full((1, 1, 1), -3.0)
    for order, args in [
        ("empty first", (zeros, empty, real, real_lse)),
        ("empty second", (real, real_lse, zeros, empty)),
    ]:
        call = f"merge of an empty row with a real partial (lse -3), {order}"
        output, lse = _merge_pair(fn, call, *args)
        if not (_close(output, real, atol=1e-6) and _close(lse, real_lse, atol=1e-6)):
            _fail(
                f"{call} gave output {output.flatten().tolist()} and lse "
                f"{lse.flatten().tolist()}: merging with nothing must return the real partial "
                f"as it is, output and lse (-3.0)"
            )


def _check_far_from_zero(fn: Callable) -> None:
    """lse values of +-1000 (exp overflows and underflows in float32) give finite results."""
    out_a, lse_a, out_b, lse_b, full, full_lse = _split_attention(0)
    for shift in (1000.0, -1000.0):
        call = f"merge with both lse shifted by {shift:+.0f}"
        output, lse = _merge_pair(fn, call, out_a, lse_a + shift, out_b, lse_b + shift)
        if not (_close(output, full, atol=1e-3) and _close(lse, full_lse + shift, atol=1e-2)):
            finite = bool(torch.isfinite(output).all() and torch.isfinite(lse).all())
            _fail(
                f"{call} is {'wrong' if finite else 'not finite'}: exp({shift:+.0f}) "
                f"{'overflows' if shift > 0 else 'underflows'} in float32. Subtract the "
                f"larger lse before exponentiating: weights exp(lse_a - m), exp(lse_b - m) "
                f"with m = max(lse_a, lse_b)"
            )
