"""Chapter 14's exercise checkers: the induction score by hand, finding a circuit, and an
ablation that removes layer-0 heads."""

import copy
import functools
import itertools
import math
from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.analysis.circuits import (
    gated_forward,
    induction_score,
    load_circuit_models,
    previous_token_score,
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

# Chapter 14: the induction score by hand, finding a circuit, and an ablation.

PERIODS = range(4, 17)  # every period whose sequence, BOS and two blocks, fits in 33 positions
TOLERANCE = 0.05  # a head this close to the best score at some period is as good an answer
# Each mystery model: its heads renumbered, and the layer-1 heads whose queries are switched
# off (uniform weights, clearly not induction heads), given as the trained model's numbers.
_MYSTERY_SWITCHED_OFF = [[], [0, 1, 3], [1, 2]]


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


def _switch_off_queries(model: TinyDecoder, layer: int, heads: list[int]) -> None:
    """Zero the queries of ``heads``: their scores are all 0, so their weights are uniform."""
    attention = model.blocks[layer].attention
    d_head = attention.head_dim
    with torch.no_grad():
        for h in heads:
            attention.q_proj.weight[h * d_head : (h + 1) * d_head] = 0.0
            if attention.q_proj.bias is not None:
                attention.q_proj.bias[h * d_head : (h + 1) * d_head] = 0.0


def _mystery_model(trained: TinyDecoder, seed: int) -> TinyDecoder:
    """The trained model with some layer-1 heads switched off, then its heads renumbered."""
    mystery = copy.deepcopy(trained)
    _switch_off_queries(mystery, 1, _MYSTERY_SWITCHED_OFF[seed])
    for layer in (0, 1):
        order = torch.randperm(4, generator=_generator(seed + 10 * layer)).tolist()
        _permute_heads(mystery, layer, order)
    return mystery


_SCORED = {  # score: (layer, the key it weighs)
    "previous": (0, "key t - 1"),
    "current": (0, "key t itself"),
    "induction": (1, "key t - period + 1"),
    "duplicate": (1, "key t - period"),
}


@torch.no_grad()
def _head_scores(model: TinyDecoder) -> dict[str, Tensor]:
    """Each head's mean weight on the keys the exercise and its typical mistakes score.

    At every period in PERIODS: 16 sequences of BOS, a random block of ``period`` tokens, the
    same block again; BOS left out. Returns (len(PERIODS), H) tensors: ``previous`` (layer
    0, key t - 1), ``current`` (layer 0, key t), ``induction`` (layer 1, key t - period + 1)
    and ``duplicate`` (layer 1, key t - period, the earlier copy of the current token).
    """
    periods = torch.tensor(PERIODS).repeat_interleave(16)  # (B,)
    # (B, 33): the block repeats to the end; causal weights up to position 2P ignore the rest
    tokens = periodic_batch(periods, _generator(7))
    # (L, B, H, 32, 32): the weights among the tokens after BOS
    weights = model.attention_weights(tokens)[..., 1:, 1:]
    scores: dict[str, list[Tensor]] = {name: [] for name in _SCORED}
    for period in PERIODS:
        # (L, 16, H, 2P, 2P): this period's sequences, two blocks
        two_blocks = weights[:, periods == period, :, : 2 * period, : 2 * period]
        scores["previous"].append(previous_token_score(two_blocks[0]).mean(dim=0))
        current = two_blocks[0].diagonal(dim1=-2, dim2=-1)  # (16, H, 2P)
        scores["current"].append(current.mean(dim=(0, 2)))
        scores["induction"].append(induction_score(two_blocks[1], period).mean(dim=0))
        duplicate = two_blocks[1].diagonal(offset=-period, dim1=-2, dim2=-1)  # (16, H, P)
        scores["duplicate"].append(duplicate.mean(dim=(0, 2)))
    return {name: torch.stack(values) for name, values in scores.items()}


@functools.cache
def _mysteries() -> tuple[TinyDecoder, ...]:
    """The mystery models, built once per session."""
    models, manifest = load_circuit_models()
    trained = models[f"random/{manifest['training']['steps']}"]
    return tuple(_mystery_model(trained, seed) for seed in range(len(_MYSTERY_SWITCHED_OFF)))


@functools.cache
def _mystery_scores(seed: int) -> dict[str, Tensor]:
    """Mystery model ``seed``'s head scores, computed once per session, and only once a
    reader's function has answered (a stub that raises never pays for them)."""
    return _head_scores(_mysteries()[seed])


def _as_good_as_best(scores: Tensor, head: int) -> bool:
    """Whether ``head``'s score (periods, H) is within TOLERANCE of the best at some period."""
    best = scores.max(dim=1).values  # (periods,)
    return bool((scores[:, head] >= best - TOLERANCE).any())


def _made_mistake(answers: list[list[int]], wanted: str) -> bool:
    """Whether every answer's head of kind ``wanted`` is, in its mystery model, the head with
    the most weight on that kind's mistaken key: a match in one model may be chance."""
    layer = _SCORED[wanted][0]
    mistake = "current" if layer == 0 else "duplicate"
    return all(
        _mystery_scores(seed)[mistake].mean(dim=0).argmax().item() == answer[layer]
        for seed, answer in enumerate(answers)
    )


def _head_hint(scores: dict[str, Tensor], wanted: str, head: int, mistaken: bool) -> str:
    """Why ``head`` is not a head of kind ``wanted``, judged from what it attends to;
    ``mistaken``: whether the answers made that kind's typical mistake in every model."""
    layer, key = _SCORED[wanted]
    mean = scores[wanted].mean(dim=0)  # (H,)
    best = mean.argmax().item()
    message = (
        f"layer {layer}'s head {head} puts {mean[head]:.2f} on {key} (mean over periods "
        f"{PERIODS[0]} to {PERIODS[-1]}), head {best} puts {mean[best]:.2f}"
    )
    mistake = "current" if layer == 0 else "duplicate"
    notes = []
    if mistaken:
        notes.append(
            f"head {head} is the one with the most weight on {_SCORED[mistake][1]}"
            + (
                ", the earlier copy of the current token: if that is the key you scored, an "
                "induction head looks one key further, at the token that followed it: key "
                "t - period + 1"
                if layer == 1
                else ": if that is the key you scored, the previous token is key t - 1"
            )
        )
    if mean.argmin().item() == head:
        notes.append("that is the lowest score of the layer; take the highest")
    if not notes:
        notes.append("score every head on repeated sequences and take the highest")
    return f"{message}. {'. '.join(note[0].upper() + note[1:] for note in notes)}"


def _accepted(scores: dict[str, Tensor], pair: list[int]) -> bool:
    """Whether ``pair`` is (a previous-token head, an induction head) of a mystery model."""
    return _as_good_as_best(scores["previous"], pair[0]) and _as_good_as_best(
        scores["induction"], pair[1]
    )


def _answer(fn: Callable[[TinyDecoder], tuple], seed: int, model: TinyDecoder) -> list[int]:
    """``fn``'s answer on mystery model ``seed``, checked to be two head numbers."""
    mystery = copy.deepcopy(model)  # the reader's function may change its model
    call = f"find_circuit(mystery model {seed})"
    answer = _call(fn, call, mystery)
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        _fail(f"{call} should return two head numbers (previous, induction), got {answer!r}")
    got = [a.item() if torch.is_tensor(a) and a.numel() == 1 else a for a in answer]
    if any(isinstance(a, bool) or not isinstance(a, int) for a in got):
        _fail(f"{call} should return two ints, got {answer!r}")
    if any(not 0 <= a < 4 for a in got):
        _fail(f"{call} returned {tuple(got)}: each layer has heads 0 to 3")
    return got


@_checker
def check_find_circuit(fn: Callable[[TinyDecoder], tuple]) -> None:
    """``fn(model)`` -> (previous-token head in layer 0, induction head in layer 1), as ints.

    Three mystery models: chapter 14's trained one with its heads renumbered at random, and
    in two of them some layer-1 heads switched off (queries zeroed), so that the induction
    heads stand clearly apart. Heads nearly tied are equally good: a head whose score is
    within TOLERANCE of the best at some period from 4 to 16 is accepted.
    """
    answers = [_answer(fn, seed, model) for seed, model in enumerate(_mysteries())]
    for seed, got in enumerate(answers):
        scores = _mystery_scores(seed)
        previous_ok = _as_good_as_best(scores["previous"], got[0])
        if previous_ok and _as_good_as_best(scores["induction"], got[1]):
            continue
        call = f"find_circuit(mystery model {seed})"
        # where layer 1's heads are nearly tied, a wrong layer-0 head can pass as an
        # induction head by chance: call it swapped only if it is so in every model
        if all(_accepted(_mystery_scores(s), answer[::-1]) for s, answer in enumerate(answers)):
            _fail(
                f"{call} returned {tuple(got)}: the order is (previous-token head, induction head)"
            )
        if not previous_ok:
            hint = _head_hint(scores, "previous", got[0], _made_mistake(answers, "previous"))
            _fail(f"{call}: {hint}")
        hint = _head_hint(scores, "induction", got[1], _made_mistake(answers, "induction"))
        _fail(f"{call}: {hint}")
    _succeed(
        "a previous-token head and an induction head, found however the heads are numbered "
        "and whichever are switched off"
    )


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


# check_repeated_loss_without's cases: (period, layer-0 heads removed); removing the
# previous-token heads [0, 2] first, where every typical mistake gives a different number
_ABLATIONS = [(16, [0, 2]), (12, [1, 3]), (8, [2]), (10, [])]


@functools.cache
def _trained() -> TinyDecoder:
    """Chapter 14's trained model (seed 0, the last step), loaded once per session."""
    models, manifest = load_circuit_models()
    return models[f"random/{manifest['training']['steps']}"]


@torch.no_grad()
def _repeated_loss(
    tokens: Tensor, period: int, gated: dict[int, list[int]], *, first: int, shift: int = 1
) -> float:
    """The trained model's mean loss over queries ``first`` .. T - 2, heads ``gated``
    ({layer: heads}) off; ``shift`` 0 scores logits at t against token t (a mistake)."""
    gates = torch.ones(2, 4)  # (L, H)
    for layer, heads in gated.items():
        gates[layer, heads] = 0.0
    logits, _ = gated_forward(_trained(), tokens, gates)  # (B, T, V)
    T = tokens.size(1)
    # (B, V, T - 1) against (B, T - 1): query t scored on token t + shift
    losses = torch.nn.functional.cross_entropy(
        logits[:, : T - 1].transpose(1, 2), tokens[:, shift : T - 1 + shift], reduction="none"
    )
    return losses[:, first:].mean().item()


def _loss_hint(value: float, tokens: Tensor, period: int, heads: list[int]) -> str | None:
    """What a wrong ``value`` computed, if it is one of the typical mistakes."""
    others = [h for h in range(4) if h not in heads]
    mistakes = [
        (
            _repeated_loss(tokens, period, {0: heads}, first=0),
            "that is the mean over every query; the first block cannot be predicted: average "
            "queries period + 1 .. T - 2 only",
        ),
        (
            _repeated_loss(tokens, period, {0: heads}, first=period),
            "that includes query `period`, which predicts the second block's first token: its "
            "own token has no earlier copy, so start at query period + 1",
        ),
        (
            _repeated_loss(tokens, period, {1: heads}, first=period + 1),
            "that gates the heads of layer 1; the heads to remove are layer 0's, gates[0, heads]",
        ),
        (
            _repeated_loss(tokens, period, {0: others}, first=period + 1),
            "that removes every other layer-0 head and keeps these: a gate of 0 removes a head",
        ),
        (
            _repeated_loss(tokens, period, {}, first=period + 1),
            "that is the loss with every head in place: set gates[0, heads] = 0 and pass the "
            "gates to gated_forward",
        ),
        (
            _repeated_loss(tokens, period, {0: heads}, first=period + 1, shift=0),
            "the logits at query t predict token t + 1: compare logits[:, :-1] with tokens[:, 1:]",
        ),
    ]
    for mistake, hint in mistakes:
        if abs(value - mistake) < 1e-3:
            return hint
    return None


@_checker
def check_repeated_loss_without(fn: Callable[[TinyDecoder, Tensor, int, list], float]) -> None:
    """``fn(model, tokens (B, T), period, heads)`` -> the mean loss over queries period + 1 ..
    T - 2 with layer 0's ``heads`` gated off, on chapter 14's trained model."""
    model = _trained()
    for index, (period, heads) in enumerate(_ABLATIONS):
        tokens = periodic_batch(torch.full((64,), period), _generator(20 + index))  # (64, 33)
        call = f"repeated_loss_without(model, tokens (64, 33), {period}, {heads})"
        answer = _call(fn, call, copy.deepcopy(model), tokens.clone(), period, list(heads))
        value = answer.item() if torch.is_tensor(answer) and answer.numel() == 1 else answer
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(f"{call} should return one number, got {type(answer).__name__}")
        expected = _repeated_loss(tokens, period, {0: heads}, first=period + 1)
        if abs(value - expected) < 1e-3:
            continue
        hint = _loss_hint(value, tokens, period, heads)
        _fail(
            f"{call} returned {value:.3f}, expected {expected:.3f}" + (f": {hint}" if hint else "")
        )
    tokens = periodic_batch(torch.full((64,), 16), _generator(20))  # (64, 33)
    pairs = {
        pair: fn(copy.deepcopy(model), tokens.clone(), 16, list(pair))
        for pair in itertools.combinations(range(4), 2)
    }
    table = ", ".join(f"{list(pair)}: {float(loss):.2f}" for pair, loss in pairs.items())
    _succeed(
        f"your function, at period 16, each pair of layer-0 heads removed: {table} nats "
        f"(ln 64 = {math.log(64):.2f})"
    )
