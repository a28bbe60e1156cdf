"""Chapter 15's exercise checkers: sliding windows and sinks."""

from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.core.masks import causal_mask
from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _check_bool_mask,
    _checker,
    _close,
    _fail,
    _first_difference,
    _generator,
    _succeed,
)
from attnbook.layers.sinks import streaming_mask

# Chapter 15: sliding windows and sinks.


@_checker
def check_sink_window_mask(fn: Callable[[int, int, int], Tensor]) -> None:
    """``fn(T, window, n_sink)``: StreamingLLM's (T, T) mask, the last keys plus the first ones."""
    for length, window, n_sink in [(6, 2, 1), (8, 3, 2), (5, 1, 0), (4, 2, 6), (7, 7, 3)]:
        call = f"sink_window_mask({length}, {window}, {n_sink})"
        mask = _check_bool_mask(_call(fn, call, length, window, n_sink), call, (length, length))
        expected = streaming_mask(length, window, n_sink)
        if torch.equal(mask, expected):
            continue
        row, key = _first_difference(mask, expected)
        if mask[row, key] and key > row:
            _fail(f"{call}: row {row} may attend to key {key}, which is in its future")
        if mask[row, key]:
            _fail(
                f"{call}: row {row} may attend to key {key}, {row - key} steps back: outside "
                f"its window of {window} keys (itself included) and not one of the first {n_sink}"
            )
        if key < n_sink:
            _fail(f"{call}: row {row} may not attend to key {key}, one of the {n_sink} sink keys")
        _fail(f"{call}: row {row} may not attend to key {key}, which is inside its window")
    _succeed("the last `window` keys plus the first `n_sink`, never a key in the future")


def _sink_weight_mistakes(scores: Tensor, sinks: Tensor) -> list[tuple[Tensor, str]]:
    """What typical mistakes return for ``scores`` (H, T, S) and ``sinks`` (H,), and why."""
    sink_column = sinks[:, None, None].expand(*scores.shape[:-1], 1)  # (H, T, 1)
    sink_last = torch.cat([scores, sink_column], dim=-1).softmax(dim=-1)  # (H, T, S + 1)
    sink_first = torch.cat([sink_column, scores], dim=-1).softmax(dim=-1)  # (H, T, S + 1)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # (H, T, 1)
    return [
        (
            scores.softmax(dim=-1),
            "every row sums to 1, so the sink took nothing; normalise over S + 1 entries, "
            "the sink's logit included",
        ),
        (
            sink_last[..., 1:],
            "[..., 1:] drops key 0; the sink is the softmax's last column: drop that one, "
            "[..., :-1]",
        ),
        (
            sink_first[..., :-1],
            "the sink column is put first, but the last column (key S - 1) was dropped; drop "
            "the sink's own column",
        ),
        (
            scores.softmax(dim=-1) * torch.sigmoid(sinks[:, None, None] - lse),
            "the rescaling factor is the keys' share sigma(lse - s_h); sigma(s_h - lse) is the "
            "sink's own share",
        ),
        (
            torch.cat([scores, -sink_column], dim=-1).softmax(dim=-1)[..., :-1],
            "the sink's logit has the wrong sign: it enters the softmax as it is, exp(s_h)",
        ),
    ]


@_checker
def check_sink_weights(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(scores (H, T, S), sinks (H,))`` -> weights (H, T, S) of a softmax with a sink column."""
    generator = _generator(0)
    scores = torch.randn(3, 4, 5, generator=generator).double()  # (H, T, S)
    scores = scores.masked_fill(~causal_mask(4, 5, align="bottom-right"), float("-inf"))
    sinks = torch.tensor([-2.0, 0.0, 1.5], dtype=torch.float64)  # (H,)
    call = "weights_with_sink(scores (3, 4, 5), sinks (3,))"
    result = _as_tensor(_call(fn, call, scores.clone(), sinks.clone()), call, "a tensor")
    if tuple(result.shape) != (3, 4, 5):
        kept = result.dim() == 3 and result.shape[-1] == 6
        extra = " (drop the sink's column after the softmax)" if kept else ""
        _fail(f"{call} should return shape (H, T, S) = (3, 4, 5), got {tuple(result.shape)}{extra}")
    lse = torch.logsumexp(scores, dim=-1)  # (H, T)
    expected = torch.exp(scores - torch.logaddexp(lse, sinks[:, None])[..., None])  # (H, T, S)
    if _close(result, expected, atol=1e-6):
        _succeed("rows sum to 1 - p_sink: the sink takes its share and leaves no value behind")
        return
    if not torch.isfinite(result).all():
        _fail(
            f"{call} has NaN or inf entries: a masked score (-inf) must give weight 0, and "
            f"every row has the sink, so no row is empty"
        )
    for mistake, explanation in _sink_weight_mistakes(scores, sinks):
        if _close(result, mistake, atol=1e-6):
            _fail(f"{call}: {explanation}")
    _fail(f"{call}: the weights differ from exp(score) / (sum of exp(scores) + exp(sink))")


@_checker
def check_receptive_field(fn: Callable[[list, int], int]) -> None:
    """``fn(windows, seq_len)`` -> input positions that can reach the last output.

    ``windows`` lists each layer's window from the bottom up: an int for a sliding-window layer,
    ``None`` for a global (full causal) layer.
    """
    cases = [([4], 24), ([4] * 5, 24), ([3, 5, 9], 99), ([1, 1, 1], 10), ([5] * 10, 20)]
    cases += [([4, None, 4], 50), ([None], 7), ([2, 8, 8, 8, 8, 8, None], 300)]
    for windows, seq_len in cases:
        call = f"receptive_field({windows}, {seq_len})"
        result = _call(fn, call, list(windows), seq_len)
        if isinstance(result, bool) or not isinstance(result, int):
            _fail(f"{call} should return an int, got {type(result).__name__}")
        if None in windows:
            if result != seq_len:
                _fail(
                    f"{call} returned {result}, expected {seq_len}: a global layer lets the last "
                    f"position see every earlier one, and the residual carries each one's input"
                )
            continue
        reach = sum(window - 1 for window in windows) + 1
        expected = min(seq_len, reach)
        if result == expected:
            continue
        if result == min(seq_len, len(windows) * (windows[0] - 1) + 1):
            _fail(f"{call} returned {result}, expected {expected}: add each layer's own W - 1")
        if result == min(seq_len, sum(windows)):
            _fail(
                f"{call} returned {result}, expected {expected}: each layer reaches "
                f"window - 1 positions further back; the position itself is counted once"
            )
        if result == reach:
            _fail(f"{call} returned {result}: no more than the {seq_len} positions that exist")
        _fail(f"{call} returned {result}, expected {expected}")
    _succeed("the sum of W - 1 over the window layers, plus 1, capped; a global layer sees all")
