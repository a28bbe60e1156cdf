"""Chapter 14's exercise checkers: finding a circuit, and the induction score by hand."""

import copy
from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.analysis.circuits import (
    circuit_measurements,
    induction_score,
    load_circuit_models,
)
from attnbook.core.masks import causal_mask
from attnbook.exercises._common import (
    _call,
    _checker,
    _fail,
    _generator,
    _succeed,
)
from attnbook.models.decoder import TinyDecoder
from attnbook.models.periodic import periodic_batch

# Chapter 14: finding a circuit, and the induction score by hand.


def _permute_heads(model: TinyDecoder, layer: int, order: list[int]) -> None:
    """Renumber layer ``layer``'s heads in place: new head i is old head ``order[i]``.

    Each head owns a block of d_head rows of W_Q, W_K, W_V (and their biases) and the same
    block of columns of W_O; moving the blocks together leaves the model's output unchanged.
    """
    attention = model.blocks[layer].attention
    d_head = attention.head_dim
    rows = torch.cat([torch.arange(h * d_head, (h + 1) * d_head) for h in order])
    with torch.no_grad():
        for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
            projection.weight.copy_(projection.weight[rows])
            if projection.bias is not None:
                projection.bias.copy_(projection.bias[rows])
        attention.out_proj.weight.copy_(attention.out_proj.weight[:, rows])


def _circuit_heads(model: TinyDecoder) -> tuple[int, int, dict]:
    """The layer-0 head with the highest previous-token score and the layer-1 head with the
    highest induction score, on fresh periodic sequences, and the scores themselves."""
    periods = torch.full((64,), 12)
    tokens = periodic_batch(periods, _generator(7))[:, : 2 * 12 + 1]  # (64, 25)
    found = circuit_measurements(model, tokens, 12)
    return found["previous"][0].argmax().item(), found["induction"][1].argmax().item(), found


@_checker
def check_find_circuit(fn: Callable[[TinyDecoder], tuple]) -> None:
    """``fn(model)`` -> (previous-token head in layer 0, induction head in layer 1), as ints.

    The model is chapter 14's trained one with its heads renumbered at random, three times.
    """
    models, manifest = load_circuit_models()
    trained = models[f"random/{manifest['training']['steps']}"]
    for seed in range(3):
        orders = [
            torch.randperm(4, generator=_generator(seed + 10 * layer)).tolist() for layer in (0, 1)
        ]
        mystery = copy.deepcopy(trained)
        for layer, order in enumerate(orders):
            _permute_heads(mystery, layer, order)
        previous, induction, found = _circuit_heads(mystery)
        call = f"find_circuit(model with heads renumbered, seed {seed})"
        answer = _call(fn, call, mystery)
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            _fail(f"{call} should return two head numbers (previous, induction), got {answer!r}")
        got = [a.item() if torch.is_tensor(a) else a for a in answer]
        if any(isinstance(a, bool) or not isinstance(a, int) for a in got):
            _fail(f"{call} should return two ints, got {answer!r}")
        if got == [induction, previous]:
            _fail(
                f"{call} returned {tuple(got)}: the order is (previous-token head, induction head)"
            )
        if got[0] != previous:
            scores = found["previous"][0].tolist()
            _fail(
                f"{call}: layer 0's head {got[0]} puts {scores[got[0]]:.2f} on the previous "
                f"token, head {previous} puts {scores[previous]:.2f}; score every head on "
                f"periodic sequences and take the highest"
            )
        if got[1] != induction:
            scores = found["induction"][1].tolist()
            _fail(
                f"{call}: layer 1's head {got[1]} has induction score {scores[got[1]]:.2f}, head "
                f"{induction} has {scores[induction]:.2f}; use the weights on the repeated "
                f"tokens, key t - period + 1"
            )
    _succeed("the previous-token head and the induction head, found however the heads are numbered")


@_checker
def check_induction_share(fn: Callable[[Tensor, int], float]) -> None:
    """``fn(weights (T, T), period)`` -> mean of weights[t, t - period + 1], t = period .. T - 1."""
    scores = torch.randn(9, 9, generator=_generator(3))  # (T, S)
    weights = scores.masked_fill(~causal_mask(9), float("-inf")).softmax(dim=-1)  # (T, S)
    for period in (4, 1, 8, 3):
        call = f"induction_share(weights (9, 9), {period})"
        answer = _call(fn, call, weights.clone(), period)
        value = answer.item() if torch.is_tensor(answer) and answer.numel() == 1 else answer
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(f"{call} should return one number, got {type(answer).__name__}")
        expected = induction_score(weights, period).item()
        if abs(value - expected) < 1e-6:
            continue
        on_match = weights.diagonal(offset=-period).mean().item() if period < 9 else None
        if on_match is not None and abs(value - on_match) < 1e-6:
            _fail(
                f"{call}: that is the weight on key t - period, the earlier copy of the current "
                f"token itself; an induction head looks one further, at key t - period + 1"
            )
        padded = weights.diagonal(offset=-(period - 1))[1:].sum().item() / 9  # zeros for t < period
        if abs(value - padded) < 1e-6:
            _fail(f"{call}: average over the {9 - period} queries t = period .. T - 1 only")
        with_early = weights.diagonal(offset=-(period - 1)).mean().item()
        if abs(value - with_early) < 1e-6:
            _fail(
                f"{call}: queries t < period have no earlier copy of their token; average "
                f"over t = period .. T - 1 only"
            )
        _fail(f"{call} returned {value:.4f}, expected {expected:.4f}")
    _succeed("the induction score averages weights[t, t - period + 1] over t = period .. T - 1")
