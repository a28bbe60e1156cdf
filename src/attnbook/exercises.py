"""Checkers for the chapters' exercises: each takes the reader's function and tests it.

A checker prints one line starting with ``Correct:`` when the function is right, and one
starting with ``Not attempted yet:`` when it is still the chapter's stub (it raises
``NotImplementedError``). When it is wrong, it raises :class:`ExerciseError` (an
``AssertionError``) whose message says in plain words what is wrong, for example
``window_mask(6, 2): row 3 may attend to key 5, which is in its future``. Checkers never
change the reader's function or the global random state.

Guide for a new checker: name it ``check_<what the reader writes>(fn)``; call ``fn`` on a few
small cases, including edge cases; compare with a reference computed here; for the first
difference, raise :func:`_fail` with a sentence naming the call, the row or head, and the rule
it breaks; end with :func:`_succeed`. Test it in ``tests/test_exercises.py`` against the
reference solution and at least two typical mistakes.
"""

import copy
import functools
import math
import statistics
from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnbook.circuits import (
    circuit_measurements,
    induction_score,
    load_circuit_models,
    periodic_batch,
)
from attnbook.decoder import TinyDecoder
from attnbook.head_analysis import gradient_importance, supported_orderings
from attnbook.kv_cache import KVCache
from attnbook.latent import MultiHeadLatentAttention
from attnbook.masks import causal_mask
from attnbook.multihead import MultiHeadAttention
from attnbook.positions import alibi_slopes, apply_rope
from attnbook.seq2seq import Seq2Seq
from attnbook.sinks import streaming_mask


class ExerciseError(AssertionError):
    """The reader's answer is not right yet; the message says why."""


def _fail(message: str) -> None:
    raise ExerciseError(message)


def _succeed(message: str) -> None:
    print(f"Correct: {message}")


def _call(fn: Callable, call: str, *args):
    try:
        return fn(*args)
    except (ExerciseError, NotImplementedError):
        raise
    except Exception as error:  # the reader's code failed: say where, keep the cause attached
        raise ExerciseError(f"{call} raised {type(error).__name__}: {error}") from error


def _as_tensor(result, call: str, what: str) -> Tensor:
    if not torch.is_tensor(result):
        _fail(f"{call} should return {what}, got {type(result).__name__}")
    return result


def _check_bool_mask(result, call: str, shape: tuple[int, int]) -> Tensor:
    mask = _as_tensor(result, call, "a boolean tensor")
    if mask.dtype != torch.bool:
        _fail(f"{call} should return a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if tuple(mask.shape) != shape:
        _fail(f"{call} should return shape (T, S) = {shape}, got {tuple(mask.shape)}")
    return mask


def _first_difference(result: Tensor, expected: Tensor) -> tuple[int, int]:
    row, col = (result != expected).nonzero()[0].tolist()
    return row, col


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _close(result: Tensor, expected: Tensor, *, atol: float, rtol: float = 1e-5) -> bool:
    """Compare in float64, so an answer computed in any float dtype can be right."""
    return torch.allclose(result.double(), expected.double(), atol=atol, rtol=rtol)


def _not_attempted(fn: Callable) -> None:
    name = getattr(fn, "__name__", "your answer")
    print(
        f"Not attempted yet: {name} still raises NotImplementedError. Write its body in the "
        "cell above, run that cell, then run this check again."
    )


def _checker(check: Callable[[Callable], None]) -> Callable[[Callable], None]:
    """Run ``check`` on a fork of the global random state: the reader's state stays as it was.

    A learner's cell starts as a stub that raises ``NotImplementedError``; checking the stub
    prints that the exercise has not been attempted yet instead of failing.
    """

    @functools.wraps(check)
    def run(fn: Callable) -> None:
        with torch.random.fork_rng():
            try:
                check(fn)
            except NotImplementedError:
                _not_attempted(fn)

    return run


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


# Chapter 1: the parameters that attention adds to the encoder-decoder.


@_checker
def check_attention_parameter_count(fn: Callable[[int], int]) -> None:
    """``fn(D)``: how many more parameters ``Seq2Seq(attention=True)`` has than the plain one."""
    for width in (4, 16, 32):
        call = f"attention_parameter_count({width})"
        answer = _call(fn, call, width)
        if isinstance(answer, bool) or not isinstance(answer, int):
            _fail(f"{call} should return a whole number (int), got {answer!r}")
        models = [Seq2Seq(11, 8, width, attention=flag) for flag in (True, False)]
        counts = [sum(p.numel() for p in model.parameters()) for model in models]
        expected = counts[0] - counts[1]
        if answer != expected:
            _fail(
                f"{call} returned {answer}, but the attention model has {expected} more "
                f"parameters than the plain one (off by {answer - expected}): count the entries "
                f"of W (D x D), U (D x 2D) and v (D) again, with no biases"
            )
    _succeed("W, U and v add 3 D^2 + D parameters")


# Chapter 2: Luong's concat score.


@_checker
def check_concat_scores(fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> None:
    """``fn(query (T, d_q), key (S, d_k), W (h, d_q + d_k), v (h,))`` -> scores (T, S)."""
    generator = _generator(0)
    n_queries, n_keys, query_dim, key_dim, hidden = 3, 5, 6, 4, 7
    query = torch.randn(n_queries, query_dim, generator=generator)  # (T, d_q)
    key = torch.randn(n_keys, key_dim, generator=generator)  # (S, d_k)
    W = torch.randn(hidden, query_dim + key_dim, generator=generator)  # (h, d_q + d_k)
    v = torch.randn(hidden, generator=generator)  # (h,)
    call = "concat_scores(query (3, 6), key (5, 4), W (7, 10), v (7,))"
    result = _as_tensor(_call(fn, call, query, key, W, v), call, "a tensor of scores")
    W_q, W_k = W[:, :query_dim], W[:, query_dim:]  # (h, d_q), (h, d_k)
    expected = torch.tanh((query @ W_q.T)[:, None, :] + (key @ W_k.T)[None, :, :]) @ v  # (T, S)
    if tuple(result.shape) == (n_keys, n_queries):
        _fail(
            f"{call} returned shape {tuple(result.shape)}: rows and columns are swapped, "
            f"expected (T, S) = ({n_queries}, {n_keys}), one row per query"
        )
    if tuple(result.shape) != (n_queries, n_keys):
        _fail(f"{call} returned shape {tuple(result.shape)}, expected (T, S) = (3, 5)")
    if _close(result, expected, atol=1e-5):
        _succeed("the concat score v^T tanh(W [q; k]) is the additive score with W = [W_q, W_k]")
        return
    key_first = (
        torch.tanh((key @ W[:, :key_dim].T)[None, :, :] + (query @ W[:, key_dim:].T)[:, None, :])
        @ v
    )  # (T, S): the mistake of stacking [k; q]
    if _close(result, key_first, atol=1e-5):
        _fail(f"{call}: the pairs are stacked as [k; q]; put the query first, [q; k]")
    no_tanh = ((query @ W_q.T)[:, None, :] + (key @ W_k.T)[None, :, :]) @ v  # (T, S)
    if _close(result, no_tanh, atol=1e-5):
        _fail(f"{call}: the tanh is missing: apply it to W [q; k] before the product with v")
    difference = (result - expected).abs().max().item()
    _fail(
        f"{call}: the scores differ from v^T tanh(W [q; k]) by up to {difference:.3g}. Stack "
        f"each query in front of each key ([q; k], query first), multiply by W, take tanh, then v"
    )


# Chapter 3: how long a sequence's score tensor may be for a memory budget.


@_checker
def check_largest_length(fn: Callable[[int, int, int], int]) -> None:
    """``fn(budget_bytes, n_heads, bytes_per_score)``: the largest T whose (1, H, T, T) fits."""
    for budget, n_heads, size in [(2**30, 8, 4), (2**20, 1, 2), (10**6, 3, 4), (100, 1, 4)]:
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


# Chapter 5: one head's projection inside nn.MultiheadAttention's packed weight.


@_checker
def check_head_projection(fn: Callable[[nn.MultiheadAttention, str, int], tuple]) -> None:
    """``fn(torch_mha, role, h)`` -> (weight (d_head, D), bias (d_head,)) of head h for role."""
    width, n_heads = 12, 3
    head_width = width // n_heads
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(width, n_heads, batch_first=True)
    nn.init.normal_(torch_mha.in_proj_bias)
    slices = {
        (role, h): slice(index * width + h * head_width, index * width + (h + 1) * head_width)
        for index, role in enumerate("qkv")
        for h in range(n_heads)
    }
    for (role, h), rows in slices.items():
        call = f"head_projection(mha, {role!r}, {h})"
        answer = _call(fn, call, torch_mha, role, h)
        if not isinstance(answer, tuple) or len(answer) != 2:
            _fail(f"{call} should return a pair (weight, bias), got {type(answer).__name__}")
        weight, bias = (_as_tensor(part, call, "two tensors") for part in answer)
        if tuple(weight.shape) != (head_width, width):
            _fail(
                f"{call}: the weight has shape {tuple(weight.shape)}, expected (d_head, D) = "
                f"({head_width}, {width}): d_head rows of in_proj_weight"
            )
        if tuple(bias.shape) != (head_width,):
            _fail(f"{call}: the bias has shape {tuple(bias.shape)}, expected (d_head,)")
        if torch.equal(weight, torch_mha.in_proj_weight[rows]):
            if not torch.equal(bias, torch_mha.in_proj_bias[rows]):
                _fail(f"{call}: the weight is right, but the bias comes from other rows")
            continue
        for (other_role, other_h), other_rows in slices.items():
            if torch.equal(weight, torch_mha.in_proj_weight[other_rows]):
                _fail(
                    f"{call} returned the rows of role {other_role!r}, head {other_h}. "
                    f"in_proj_weight stacks W_q, W_k, W_v (D rows each), and inside each block "
                    f"head h owns rows h * d_head to (h + 1) * d_head"
                )
        _fail(f"{call}: these rows are not any one head's slice of in_proj_weight")
    _succeed("every head's slice of in_proj_weight and in_proj_bias is right")


# Chapter 6: sharing key/value heads.


@_checker
def check_repeat_kv(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x (B, H_kv, S, d_head), n_repeats)`` -> (B, H_kv * n_repeats, S, d_head)."""
    named = torch.arange(3.0).view(1, 3, 1, 1).expand(2, 3, 4, 5)  # (B, H_kv, S, d_head)
    random_kv = torch.randn(2, 4, 3, 8, generator=_generator(0))  # (B, H_kv, S, d_head)
    for name, x in [("heads named 0, 1, 2", named), ("random keys", random_kv)]:
        for n_repeats in (1, 2, 4):
            call = f"repeat_kv(x of shape {tuple(x.shape)}, {n_repeats}) with {name}"
            result = _as_tensor(_call(fn, call, x, n_repeats), call, "a tensor")
            batch, n_kv_heads, length, head_dim = x.shape
            shape = (batch, n_kv_heads * n_repeats, length, head_dim)
            if tuple(result.shape) != shape:
                _fail(
                    f"{call}: expected shape {shape} (B, H, S, d_head), got {tuple(result.shape)}"
                )
            expected = x.repeat_interleave(n_repeats, dim=1)  # (B, H, S, d_head)
            if torch.equal(result, expected):
                continue
            if torch.equal(result, x.repeat(1, n_repeats, 1, 1)):
                order = [h % n_kv_heads for h in range(n_kv_heads * n_repeats)]
                _fail(
                    f"{call}: the heads come out in the order {order}, which tiles them. Query "
                    f"head h reads key/value head h // {n_repeats}, so the copies of one head "
                    f"must sit next to each other: "
                    f"{[h // n_repeats for h in range(n_kv_heads * n_repeats)]}"
                )
            bad_head = next(
                h for h in range(shape[1]) if not torch.equal(result[:, h], expected[:, h])
            )
            _fail(
                f"{call}: output head {bad_head} should be a copy of key/value head "
                f"{bad_head // n_repeats}, and is not"
            )
    _succeed("each key/value head is copied in place, n_repeats times, next to itself")


# Chapter 8: a KV cache that writes into preallocated buffers.


def _small_decoder() -> TinyDecoder:
    torch.manual_seed(0)
    return TinyDecoder(11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, max_len=12).eval()


def _check_appends_in_place(cache_class: Callable[[int], KVCache], name: str) -> None:
    """Two appends to one cache must return views of one buffer, whatever the buffers are called."""
    cache = _call(cache_class, f"{name}(12)", 12)
    chunks = torch.randn(2, 2, 2, 3, 4, generator=_generator(1))  # (chunk, B, H_kv, S, d_head)
    storages = []
    for index, chunk in enumerate(chunks):
        call = f"{name}(12).append(keys, values) (call {index + 1})"
        returned = _call(cache.append, call, chunk, chunk.clone())
        if not isinstance(returned, tuple) or len(returned) != 2:
            _fail(f"{call} should return (keys, values), got {type(returned).__name__}")
        keys = _as_tensor(returned[0], call, "the cached keys as a tensor")
        storages.append(keys.untyped_storage().data_ptr())
    if storages[0] != storages[1]:
        _fail(
            "append allocated new memory for the keys: it should write into the buffer allocated "
            "on the first call and return a view of its filled part"
        )


@_checker
def check_preallocated_kv_cache(cache_class: Callable[[int], KVCache]) -> None:
    """``cache_class(max_len)``: a KVCache whose ``append`` writes into buffers allocated once."""
    model = _small_decoder()
    prompt = torch.randint(0, 11, (2, 4), generator=_generator(0))  # (B, T0)
    name = getattr(cache_class, "__name__", "cache_class")
    caches = [_call(cache_class, f"{name}(12)", 12) for _ in model.blocks]
    plain = model.new_caches()
    chunks = {"the 4-token prompt": prompt, "1 more token": prompt[:, :1], "2 more": prompt[:, 1:3]}
    with torch.no_grad():
        for label, chunk in chunks.items():
            expected = model(chunk, plain)  # (B, T, V)
            got = _call(model, f"decoding {label} with {name}", chunk, caches)  # (B, T, V)
            if not _close(got, expected, atol=1e-5):
                _fail(
                    f"after {label}, the logits differ from those of the plain KVCache: append "
                    f"must return the keys and values of every cached position, oldest first, "
                    f"and len(cache) must count them (the model reads its positions from it)"
                )
    if len(caches[0]) != 7:
        _fail(f"len(cache) should be 7 after caching 4 + 1 + 2 positions, got {len(caches[0])}")
    _check_appends_in_place(cache_class, name)
    _succeed("decoding with your cache matches KVCache, and append writes in place")


# Chapter 9: the log-sum-exp computed online.


@_checker
def check_online_logsumexp(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x (..., S), block_size)`` -> log sum_j exp(x_j) per row (...,), in one blocked pass."""
    rows = torch.randn(4, 7, 45, generator=_generator(0)) * 5  # (..., S)
    expected = torch.logsumexp(rows, dim=-1)  # (4, 7)
    for block_size in (1, 8, 45, 100):
        call = f"online_logsumexp(x (4, 7, 45), {block_size})"
        result = _as_tensor(_call(fn, call, rows.clone(), block_size), call, "a tensor")
        if tuple(result.shape) != (4, 7):
            _fail(
                f"{call} should return one value per row, shape (4, 7), got {tuple(result.shape)}"
            )
        if not _close(result, expected, atol=1e-4):
            _fail(
                f"{call} differs from torch.logsumexp by up to "
                f"{(result - expected).abs().max().item():.3g}: when the running maximum "
                f"grows, multiply the running sum by exp(old max - new max)"
            )
    huge = torch.tensor([[1000.0, 1000.0]])  # exp(1000) overflows float32
    call = "online_logsumexp([[1000, 1000]], 1)"
    result = _as_tensor(_call(fn, call, huge, 1), call, "a tensor")
    if not torch.isfinite(result).all():
        _fail(
            f"{call} is not finite: exp(1000) overflows float32, so subtract the running "
            "maximum before exponentiating"
        )
    tiny = torch.tensor([[-1000.0, -1000.0]])  # exp(-1000) underflows to 0 in float32
    call = "online_logsumexp([[-1000, -1000]], 1)"
    result = _as_tensor(_call(fn, call, tiny, 1), call, "a tensor")
    if not _close(result, torch.logsumexp(tiny, dim=-1), atol=1e-3):
        _fail(
            f"{call} returned {result.flatten().tolist()}, expected about -999.307: start the "
            "running maximum at -inf, not 0, or rows far below 0 underflow to log(0)"
        )
    _succeed("m + log(l) after the last block is the log-sum-exp of the whole row")


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


# Chapter 12: KV cache bytes per token of a TinyDecoder of any attention variant.


def _cache_models() -> list[tuple[str, TinyDecoder]]:
    """(description, model) pairs: every variant, float64 once, MLA with and without RoPE.

    The 3-layer model comes first: there, forgetting the values (x 1/2) and forgetting to sum
    the layers (x 1/3) give different wrong answers, so the hint can tell which it was.
    """
    torch.manual_seed(0)
    specs = [  # description, layers, TinyDecoder keywords
        ("3-layer GQA, H = 4, H_kv = 2, d_head = 4, float32", 3, {"n_kv_heads": 2}),
        ("2-layer MHA, H = H_kv = 4, d_head = 4, float32", 2, {"n_kv_heads": 4}),
        ("2-layer MQA, H = 4, H_kv = 1, d_head = 4, float32", 2, {"n_kv_heads": 1}),
        ("2-layer MLA, d_c = 6, no RoPE, float32", 2, {"kv_latent_dim": 6}),
        ("2-layer MLA, d_c = 6, rope_dim = 4, float32", 2, {"kv_latent_dim": 6, "rope_dim": 4}),
    ]
    sizes = {"d_model": 16, "n_heads": 4, "max_len": 12}
    models = [
        (label, TinyDecoder(11, n_layers=layers, **sizes, **keywords).eval())
        for label, layers, keywords in specs
    ]
    gqa64 = TinyDecoder(11, n_layers=3, n_kv_heads=2, **sizes).double().eval()
    return models + [("3-layer GQA, H = 4, H_kv = 2, d_head = 4, float64", gqa64)]


def _cache_hint(model: TinyDecoder, result: int, expected: int) -> str:
    attention = model.blocks[0].attention
    if next(model.parameters()).dtype == torch.float64 and 2 * result == expected:
        return "take the bytes per number from the parameters' dtype (8 for float64), not 4"
    if model.variant == "mla":
        if attention.rope_dim and result * (attention.kv_latent_dim + attention.rope_dim) == (
            expected * attention.kv_latent_dim
        ):
            return "with RoPE, MLA also caches one rotary key of rope_dim numbers per token"
        return "MLA caches one latent of kv_latent_dim (+ rope_dim) numbers per token and layer"
    if result * len(model.blocks) == expected:
        return "every layer keeps its own cache: add them all up"
    if 2 * result == expected:
        return "every key/value head caches a key AND a value per token"
    if result * attention.n_kv_heads == expected * attention.n_heads:
        return "count the key/value heads (n_kv_heads), not the query heads"
    return "per layer: 2 * n_kv_heads * head_dim numbers, or kv_latent_dim + rope_dim for MLA"


@_checker
def check_cache_bytes_per_token(fn: Callable[[TinyDecoder], int]) -> None:
    """``fn(model)`` -> the KV cache bytes one token costs a :class:`TinyDecoder`, any variant."""
    prompt = torch.randint(0, 11, (1, 5), generator=_generator(0))  # (B, T)
    for label, model in _cache_models():
        caches = model.new_caches()
        with torch.no_grad():
            model(prompt, caches)
        expected = sum(cache.nbytes for cache in caches) // prompt.size(1)
        call = f"cache_bytes_per_token(<{label}>)"
        result = _call(fn, call, model)
        if isinstance(result, bool) or not isinstance(result, int):
            _fail(f"{call} should return an int (bytes), got {type(result).__name__}")
        if result != expected:
            _fail(
                f"{call} returned {result}, but its caches hold {expected} bytes per token: "
                f"{_cache_hint(model, result, expected)}"
            )
    _succeed("your formula gives the bytes the caches hold, for every variant and dtype")


# Chapter 13: what trained heads learn.


@_checker
def check_previous_share(fn: Callable[[Tensor], float]) -> None:
    """``fn(weights (T, T))`` -> mean weight on key i - 1 over the queries i = 1 .. T - 1."""
    generator = _generator(0)
    scores = torch.randn(6, 6, generator=generator)  # (T, S)
    weights = scores.masked_fill(~causal_mask(6), float("-inf")).softmax(dim=-1)  # (T, S)
    expected = weights.diagonal(offset=-1).mean().item()
    call = "previous_share(weights (6, 6))"
    answer = _call(fn, call, weights.clone())
    value = answer.item() if torch.is_tensor(answer) and answer.numel() == 1 else answer
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(f"{call} should return one number, got {type(answer).__name__}")
    if abs(value - expected) < 1e-6:
        _succeed("the previous-character share averages weights[i, i - 1] over queries 1..T-1")
        return
    with_first = torch.cat([torch.zeros(1), weights.diagonal(offset=-1)]).mean().item()
    if abs(value - with_first) < 1e-6:
        _fail(f"{call}: query 0 has no previous character; average over queries 1 to T - 1")
    if abs(value - weights.diagonal().mean().item()) < 1e-6:
        _fail(f"{call}: that is the weight on key i itself; the previous character is key i - 1")
    _fail(f"{call} returned {value:.4f}, expected {expected:.4f}: the mean of weights[i, i - 1]")


def _gated_model() -> tuple[TinyDecoder, Tensor, Tensor]:
    torch.manual_seed(0)
    model = TinyDecoder(7, d_model=8, n_heads=2, n_layers=2, max_len=6).double().eval()
    tokens = torch.randint(0, 7, (4, 7), generator=_generator(0))  # (B, T + 1)
    return model, tokens[:, :-1], tokens[:, 1:]


@_checker
def check_head_importance(fn: Callable[[nn.Module, Tensor, Tensor], Tensor]) -> None:
    """``fn(model, inputs (B, T), targets (B, T))`` -> (L, H): E_x |d loss(x) / d xi| at xi = 1."""
    model, inputs, targets = _gated_model()
    call = "head_importance(model, inputs (4, 6), targets (4, 6))"
    result = _as_tensor(_call(fn, call, model, inputs, targets), call, "an (L, H) tensor")
    if tuple(result.shape) != (2, 2):
        _fail(f"{call} should return shape (L, H) = (2, 2), got {tuple(result.shape)}")
    expected = gradient_importance(model, inputs, targets)  # (L, H)
    if _close(result.detach(), expected, atol=1e-8):
        _succeed("I_h averages |d loss / d xi_h| over windows, the absolute value taken first")
        return
    gates = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    logits = model(inputs, head_mask=gates)  # (B, T, V)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    (batch_gradient,) = torch.autograd.grad(loss, gates)  # (L, H)
    if _close(result.detach(), batch_gradient.abs(), atol=1e-8):
        _fail(
            f"{call}: that is |d (mean loss over the batch) / d xi|: take one window at a time "
            f"and average the absolute values, so gradients of opposite signs do not cancel"
        )
    if _close(result.detach(), batch_gradient, atol=1e-8):
        _fail(f"{call}: the importance is an absolute value, per window, then averaged")
    _fail(f"{call} differs from E_x |d loss(x) / d xi| at xi = 1 (all gates 1)")


_ORDERING_CASES = [  # dict H -> per-seed losses; each mistake below gives a different answer
    {1: [1.0, 1.1, 1.2], 2: [1.21, 1.31, 1.41], 4: [1.3, 1.4, 1.5]},
    {8: [2.0, 2.02, 2.04, 2.06], 1: [2.6, 2.9, 2.75], 2: [2.05, 2.35, 2.2]},
]


def _separated(losses: dict, half_width: Callable[[list[float]], float]) -> set[tuple]:
    """Pairs (a, b) with mean_a + half_width_a < mean_b - half_width_b."""
    upper = {k: statistics.fmean(v) + half_width(v) for k, v in losses.items()}
    lower = {k: statistics.fmean(v) - half_width(v) for k, v in losses.items()}
    return {(a, b) for a in losses for b in losses if a != b and upper[a] < lower[b]}


def _ordering_mistakes(losses: dict) -> list[tuple[set, str]]:
    """The answers of typical mistakes, each with what is wrong."""
    means = {k: statistics.fmean(v) for k, v in losses.items()}
    expected = supported_orderings(losses)
    return [
        (
            {(b, a) for a, b in expected},
            "the pairs are reversed: (a, b) means H = a has the LOWER loss",
        ),
        (
            {(a, b) for a in means for b in means if means[a] < means[b]},
            "that ranks by the means alone; a difference counts only when the intervals "
            "mean +- 2 standard errors do not overlap",
        ),
        (
            _separated(losses, lambda v: 2 * statistics.pstdev(v) / math.sqrt(len(v))),
            "that uses the population standard deviation (divide by n); the sample one divides "
            "by n - 1, which matters with 3 seeds",
        ),
        (
            _separated(losses, lambda v: 2 * statistics.stdev(v)),
            "that uses +- 2 standard deviations; the rule uses standard errors, std / sqrt(n)",
        ),
    ]


@_checker
def check_supported_orderings(fn: Callable[[dict], set]) -> None:
    """``fn(losses)``, losses a dict H -> per-seed losses: the pairs (a, b), a lower beyond spread.

    The rule: mean_a + 2 se_a < mean_b - 2 se_b, se the sample standard deviation over sqrt(n).
    """
    for losses in _ORDERING_CASES:
        call = f"supported_orderings({losses})"
        answer = _call(fn, call, {k: list(v) for k, v in losses.items()})
        try:
            result = {tuple(pair) for pair in answer}
        except TypeError:
            _fail(f"{call} should return a set of pairs (a, b), got {type(answer).__name__}")
        expected = supported_orderings(losses)
        if result == expected:
            continue
        for mistake, explanation in _ordering_mistakes(losses):
            if result == mistake:
                _fail(f"{call} returned {sorted(result)}: {explanation}")
        _fail(
            f"{call} returned {sorted(result)}, expected {sorted(expected)}: a pair (a, b) "
            f"belongs in the set when mean_a + 2 se_a < mean_b - 2 se_b"
        )
    _succeed("a pair is ranked only when the intervals mean +- 2 standard errors are apart")


# Chapter 5: removing one head by zeroing the columns of W_o that read it.


def _without_head_hint(pruned: nn.Module, original: nn.Module, h: int, head_width: int) -> str:
    """Name the usual mistake, judged from what the answer did to ``out_proj``."""
    weight, bias = pruned.out_proj.weight, pruned.out_proj.bias
    columns = slice(h * head_width, (h + 1) * head_width)
    if not torch.equal(bias, original.out_proj.bias):
        return (
            "out_proj.bias changed: the bias is added after the heads are mixed and belongs to "
            "no head, so removing a head leaves it as it is"
        )
    if torch.equal(weight[columns], torch.zeros_like(weight[columns])) and not torch.equal(
        weight[:, columns], torch.zeros_like(weight[:, columns])
    ):
        return (
            f"rows {h * head_width} to {(h + 1) * head_width - 1} of out_proj.weight were zeroed: "
            "a weight is stored as (out features, in features), and head h is an *input* of "
            "W_o, so zero its columns, out_proj.weight[:, h * d_head:(h + 1) * d_head]"
        )
    zero_columns = [c for c in range(weight.size(1)) if not weight[:, c].any()]
    if zero_columns:
        return (
            f"the zeroed columns of out_proj.weight are {zero_columns}; head {h} is read by "
            f"columns {h * head_width} to {(h + 1) * head_width - 1}"
        )
    return "the output differs from the layer with head h's output set to zero"


@_checker
def check_without_head(fn: Callable[[nn.Module, int], nn.Module]) -> None:
    """``fn(attention, h)``: a copy of a MultiHeadAttention in which head h contributes nothing."""
    width, n_heads = 12, 3
    head_width = width // n_heads
    torch.manual_seed(0)
    attention = MultiHeadAttention(width, n_heads).eval()
    nn.init.normal_(attention.out_proj.bias)
    x = torch.randn(2, 5, width, generator=_generator(1))  # (B, T, D)
    original = {name: value.clone() for name, value in attention.state_dict().items()}
    for h in range(n_heads):
        call = f"without_head(attention, {h})"
        pruned = _call(fn, call, attention, h)
        changed = [
            name
            for name, value in attention.state_dict().items()
            if not torch.equal(value, original[name])
        ]
        if pruned is attention or changed:
            _fail(
                f"{call} changed the layer it was given ({', '.join(changed) or 'returned it'}): "
                "copy it first (copy.deepcopy) and change the copy"
            )
        if not isinstance(pruned, MultiHeadAttention):
            _fail(f"{call} should return a MultiHeadAttention, got {type(pruned).__name__}")
        gates = torch.ones(n_heads)  # (H,)
        gates[h] = 0.0
        with torch.no_grad():
            expected, _ = attention(x, head_mask=gates)  # (B, T, D)
            got, _ = _call(pruned, f"{call}(x)", x)  # (B, T, D)
        if not _close(got, expected, atol=1e-6):
            _fail(f"{call}: {_without_head_hint(pruned, attention, h, head_width)}")
    _succeed("each head's d_head columns of W_o are zeroed in a copy, and the bias is kept")


# Chapter 9 (backward pass): the gradients of one block of queries, from the saved lse.


def _backward_case(seed: int) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], float]:
    """Inputs (q, k, v, out, lse, d_out), float64 autograd's (dq, dk, dv), and the scale."""
    generator = _generator(seed)
    q, k, v = (torch.randn(n, 4, generator=generator, dtype=torch.float64) for n in (3, 5, 5))
    d_out = torch.randn(3, 4, generator=generator, dtype=torch.float64)  # (T, d_v)
    scale = 0.5
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    scores = leaves[0] @ leaves[1].T * scale  # (T, S)
    out = torch.softmax(scores, dim=-1) @ leaves[2]  # (T, d_v)
    expected = torch.autograd.grad(out, leaves, d_out)
    lse = torch.logsumexp(scores.detach(), dim=-1, keepdim=True)  # (T, 1)
    return (q, k, v, out.detach(), lse, d_out), expected, scale


@_checker
def check_attention_backward(fn: Callable[..., tuple]) -> None:
    """``fn(q (T, d), k (S, d), v (S, d_v), out (T, d_v), lse (T, 1), d_out (T, d_v), scale)``
    -> (dq, dk, dv): the gradients of softmax(q k^T * scale) v, recomputing the weights A from
    ``lse``."""
    inputs, expected, scale = _backward_case(0)
    call = "attention_backward(q (3, 4), k (5, 4), v (5, 4), out, lse, d_out, 0.5)"
    result = _call(fn, call, *(t.clone() for t in inputs), scale)
    if not isinstance(result, tuple | list) or len(result) != 3:
        _fail(f"{call} should return a tuple (dq, dk, dv), got {type(result).__name__}")
    names = ("dq", "dk", "dv")
    for name, ours, theirs in zip(names, result, expected, strict=True):
        ours = _as_tensor(ours, call, f"{name} as a tensor")
        if tuple(ours.shape) != tuple(theirs.shape):
            _fail(
                f"{call}: {name} should have shape {tuple(theirs.shape)}, got {tuple(ours.shape)}"
            )
    dq, dk, dv = result
    if not _close(dv, expected[2], atol=1e-6):
        _fail(f"{call}: dv is wrong; dv = A^T d_out with the weights A = exp(q k^T * scale - lse)")
    if _close(dq * 0.5, expected[0], atol=1e-6) or _close(dk * 0.5, expected[1], atol=1e-6):
        _fail(
            f"{call}: dq or dk is 1 / scale times too large: the scores are q k^T * scale, so "
            "multiply dZ by the scale"
        )
    if not (_close(dq, expected[0], atol=1e-6) and _close(dk, expected[1], atol=1e-6)):
        _fail(
            f"{call}: dq or dk is wrong; dZ = A * (dA - delta) with dA = d_out v^T and "
            "delta = rowsum(d_out * out), then dq = dZ k * scale and dk = dZ^T q * scale"
        )
    _succeed(
        "dZ = A * (dA - delta) with delta = rowsum(dO * O); dq = dZ k * scale, "
        "dk = dZ^T q * scale, dv = A^T dO"
    )


# Chapter 2: the scale that gives scores of variance 1 when q and k have variance sigma^2.


@_checker
def check_scale_for(fn: Callable[[int, float], float]) -> None:
    """``fn(d, sigma)``: the factor that gives q . k variance 1 when q, k have variance sigma^2."""
    for width, sigma in [(16, 0.5), (64, 1.0), (256, 3.0), (2, 2.0)]:
        call = f"scale_for({width}, {sigma})"
        answer = _call(fn, call, width, sigma)
        if torch.is_tensor(answer) and answer.numel() == 1:
            answer = answer.item()
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            _fail(f"{call} should return a number, got {answer!r}")
        expected = 1.0 / (sigma**2 * math.sqrt(width))
        if math.isclose(answer, expected, rel_tol=1e-6):
            continue
        variance = (answer * sigma**2) ** 2 * width  # of the scaled score, exactly
        hint = ""
        if math.isclose(answer, 1.0 / (sigma * math.sqrt(width)), rel_tol=1e-6):
            hint = ": each product q_i k_i has variance sigma^4, not sigma^2"
        elif math.isclose(answer, 1.0 / math.sqrt(width), rel_tol=1e-6):
            hint = ": that is the unit-variance scale; sigma changes the variance too"
        _fail(
            f"{call} returned {answer:.4g}, which gives the scaled scores variance "
            f"{variance:.4g} instead of 1{hint}"
        )
    _succeed("q . k has variance d sigma^4, so the scale is 1 / (sigma^2 sqrt(d))")


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
        extra = " (drop the sink's column after the softmax)" if result.shape[-1] == 6 else ""
        _fail(f"{call} should return shape (H, T, S) = (3, 4, 5), got {tuple(result.shape)}{extra}")
    lse = torch.logsumexp(scores, dim=-1)  # (H, T)
    expected = torch.exp(scores - torch.logaddexp(lse, sinks[:, None])[..., None])  # (H, T, S)
    if _close(result, expected, atol=1e-6):
        _succeed("rows sum to 1 - p_sink: the sink takes its share and leaves no value behind")
        return
    if _close(result.sum(-1), torch.ones(3, 4), atol=1e-6):
        _fail(f"{call}: every row sums to 1, so the sink took nothing; normalise over S + 1")
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


# Chapter 11: absorbed scores, queries against cached latents, keys never built.


@_checker
def check_latent_scores(fn: Callable[[nn.Module, Tensor, Tensor], Tensor]) -> None:
    """``fn(layer, x (B, T, D), latents (B, S, d_c))`` -> scaled scores (B, H, T, S)."""
    layer = MultiHeadLatentAttention(16, 4, 8).eval()  # D = 16, H = 4, d_c = 8
    x = torch.randn(2, 3, 16, generator=_generator(11))  # (B, T, D)
    context = torch.randn(2, 5, 16, generator=_generator(12))  # (B, S, D)
    with torch.no_grad():
        latents = layer.kv_down(context)  # (B, S, d_c)
        q = layer.q_proj(x).unflatten(-1, (4, 4)).transpose(1, 2)  # (B, H, T, d_head)
        k = layer.k_up(latents).unflatten(-1, (4, 4)).transpose(1, 2)  # (B, H, S, d_head)
    expected = q @ k.transpose(-2, -1) / 2.0  # (B, H, T, S), 1 / sqrt(d_head = 4)

    def no_keys(module, inputs):
        _fail("latent_scores must not call layer.k_up: fold W_UK into the query instead")

    hook = layer.k_up.register_forward_pre_hook(no_keys)
    call = "latent_scores(layer (D 16, H 4, d_c 8), x (2, 3, 16), latents (2, 5, 8))"
    try:
        with torch.no_grad():
            result = _as_tensor(_call(fn, call, layer, x, latents), call, "a tensor")
    finally:
        hook.remove()
    if tuple(result.shape) != (2, 4, 3, 5):
        _fail(f"{call} should return (B, H, T, S) = (2, 4, 3, 5), got {tuple(result.shape)}")
    if _close(result, expected * 2.0, atol=1e-5):
        _fail(f"{call} forgot the scale 1 / sqrt(d_head)")
    if not _close(result, expected, atol=1e-5):
        _fail(
            f"{call} differs from q . k / sqrt(d_head): map each head's query into the latent "
            "space with W_UK^(h)T (k_up.weight viewed as (H, d_head, d_c)) and take its dot "
            "product with every latent"
        )
    _succeed("the absorbed scores equal the scores of the up-projected keys")


__all__ = [
    "ExerciseError",
    "check_alibi_slopes",
    "check_attention_backward",
    "check_attention_parameter_count",
    "check_cache_bytes_per_token",
    "check_concat_scores",
    "check_find_circuit",
    "check_head_importance",
    "check_head_projection",
    "check_induction_share",
    "check_largest_length",
    "check_latent_scores",
    "check_merge_partials",
    "check_online_logsumexp",
    "check_preallocated_kv_cache",
    "check_prefix_lm_mask",
    "check_previous_share",
    "check_receptive_field",
    "check_repeat_kv",
    "check_rope_halves",
    "check_scale_for",
    "check_sink_weights",
    "check_sink_window_mask",
    "check_supported_orderings",
    "check_window_mask",
    "check_without_head",
]
