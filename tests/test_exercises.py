"""Each exercise checker accepts the reference answer and names the mistake of a wrong one.

``WRONG_ANSWERS`` holds, for every checker, at least three plausible wrong answers and words
its hint must contain; the reference answers live in ``exercise_answers.py``.
"""

import copy
import math
import re
import statistics

import pytest
import torch
from exercise_answers import (
    SOLUTIONS,
    PreallocatedKVCache,
    alibi_slopes,
    attention_backward,
    beam_blocks,
    cache_bytes_per_token,
    causal_flash,
    causal_tile_kind,
    chunk_end_state,
    concat_scores,
    delta_rows,
    delta_rule_step,
    find_circuit,
    flash_exp2,
    gather_keys,
    head_importance,
    head_projection,
    indexer_crossover,
    latent_scores,
    merge_partials,
    moba_choice,
    orthonormal_keys,
    previous_shares,
    previous_shares_slip,
    query_magnitude,
    recall,
    receptive_field,
    rope_halves,
    sink_window_mask,
    small_dq,
    start_of_word_weight,
    supported_orderings,
    weights_with_sink,
    window_mask,
    without_head,
)

from attnbook import (
    KVCache,
    apply_rope,
    causal_mask,
    exercises,
    induction_score,
    previous_token_score,
)
from attnbook.analysis.word_start import word_start_weight as library_word_start_weight
from attnbook.exercises import ExerciseError, ch14
from attnbook.kernels import runtime
from attnbook.models.periodic import periodic_batch

CHECKERS = [name for name in exercises.__all__ if name.startswith("check_")]


def expect_message(checker, fn, fragment):
    with pytest.raises(ExerciseError, match=re.escape(fragment)):
        checker(fn)


def expect_success(checker, fn, capsys):
    checker(fn)
    assert capsys.readouterr().out.startswith("Correct: ")


# Wrong answers that need more than a lambda, chapter by chapter.


def wrong_extra_alibi_slopes(n):  # ch07: the extra slopes from slots 1, 3, ... of 2n'
    power = 2 ** math.floor(math.log2(n))
    if power == n:
        return alibi_slopes(n)
    return torch.cat([alibi_slopes(power), alibi_slopes(2 * power)[1::2][: n - power]])


def band(T, width):  # ch00: the window on both sides of the diagonal
    return window_mask(T, width) | window_mask(T, width).T


def key_first(query, key, W, v):  # ch02: the pairs stacked as [k; q]
    T, S = query.size(0), key.size(0)
    pairs = torch.cat([key[None, :, :].expand(T, S, -1), query[:, None, :].expand(T, S, -1)], -1)
    return torch.tanh(pairs @ W.T) @ v


def no_tanh(query, key, W, v):  # ch02
    T, S = query.size(0), key.size(0)
    pairs = torch.cat([query[:, None, :].expand(T, S, -1), key[None, :, :].expand(T, S, -1)], -1)
    return (pairs @ W.T) @ v


def whole_block(torch_mha, role, h):  # ch05: all heads of the role
    D = torch_mha.embed_dim
    rows = slice("qkv".index(role) * D, ("qkv".index(role) + 1) * D)
    return torch_mha.in_proj_weight[rows], torch_mha.in_proj_bias[rows]


def wrong_bias(torch_mha, role, h):  # ch05
    weight, _ = head_projection(torch_mha, role, h)
    return weight, torch_mha.in_proj_bias[: weight.size(0)]


def head_major(torch_mha, role, h):  # ch05: heads outermost, roles inside each head
    d_head = torch_mha.embed_dim // torch_mha.num_heads
    start = (h * 3 + "qkv".index(role)) * d_head
    return torch_mha.in_proj_weight[start : start + d_head], torch_mha.in_proj_bias[:d_head]


def in_place(attention, h):  # ch05: changes the layer it was given
    with torch.no_grad():
        attention.out_proj.weight[:, h * attention.head_dim : (h + 1) * attention.head_dim] = 0.0
    return attention


def zero_rows(attention, h):  # ch05
    pruned, d_head = copy.deepcopy(attention), attention.head_dim
    with torch.no_grad():
        pruned.out_proj.weight[h * d_head : (h + 1) * d_head] = 0.0
    return pruned


def bias_too(attention, h):  # ch05
    pruned = without_head(attention, h)
    with torch.no_grad():
        pruned.out_proj.bias.zero_()
    return pruned


def transposed_view(x, n_repeats):  # ch06: the new axis before the head axis
    B, S, H_kv, d_head = x.shape
    view = x[:, :, :, None].expand(B, S, H_kv, n_repeats, d_head)
    return view.transpose(2, 3).reshape(B, S, -1, d_head)


def chapter_recipe(x, n_repeats):  # ch06: x[:, :, None] as for (B, H_kv, S, d_head)
    B, S, H_kv, d_head = x.shape
    return x[:, :, None].expand(B, S, n_repeats, H_kv, d_head).reshape(B, S, -1, d_head)


def copies_along_s(x, n_repeats):  # ch06: the heads taken to be on axis 1
    B, H_kv, S, d_head = x.shape  # wrong names: x is (B, S, H_kv, d_head)
    return x[:, :, None].expand(B, H_kv, n_repeats, S, d_head).reshape(B, -1, S, d_head)


def by_broadcast(x, n_repeats):  # ch06: a multiplication by ones instead of expand
    return (x[:, :, :, None] * torch.ones(1, 1, 1, n_repeats, 1)).flatten(2, 3)


class ReturnsOnlyNew(PreallocatedKVCache):  # ch08
    def append(self, keys, values):
        super().append(keys, values)
        return keys, values


class ConcatenatingCache(KVCache):  # ch08: KVCache itself
    def __init__(self, max_len):
        super().__init__()


class CountsOneTooMany(PreallocatedKVCache):  # ch08
    def __len__(self):
        return self.length + 1


class CopiesTheValues(PreallocatedKVCache):  # ch08: keys in place, values copied every step
    def append(self, keys, values):
        keys, values = super().append(keys, values)
        return keys, values.clone()


class NoRoomCheck(PreallocatedKVCache):  # ch08: writes past max_len into an empty slice
    def append(self, keys, values):
        self.max_len, real_max = 10**6, self.max_len
        if self.keys is None:
            shape = (*keys.shape[:2], real_max, keys.shape[3])
            self.key_buffer, self.value_buffer = keys.new_empty(shape), values.new_empty(shape)
        stop = self.length + keys.size(2)
        self.key_buffer[:, :, self.length : stop] = keys
        self.value_buffer[:, :, self.length : stop] = values
        self.length, self.max_len = stop, real_max
        self.keys, self.values = self.key_buffer[:, :, :stop], self.value_buffer[:, :, :stop]
        return self.keys, self.values


def no_rescale(x, block_size):  # ch09: the old sum is not moved to the new maximum
    running_max = x.new_full(x.shape[:-1], float("-inf"))
    running_sum = x.new_zeros(x.shape[:-1])
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        running_max = torch.maximum(running_max, block.amax(dim=-1))
        running_sum = running_sum + torch.exp(block - running_max[..., None]).sum(dim=-1)
    return running_max + torch.log(running_sum)


def max_from_zero(x, block_size):  # ch09: the running maximum starts at 0, not -inf
    running_max = x.new_zeros(x.shape[:-1])
    running_sum = x.new_zeros(x.shape[:-1])
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        new_max = torch.maximum(running_max, block.amax(dim=-1))
        running_sum = running_sum * torch.exp(running_max - new_max) + torch.exp(
            block - new_max[..., None]
        ).sum(-1)
        running_max = new_max
    return running_max + torch.log(running_sum)


def no_row_dot(q, k, v, out, lse, d_out, scale):  # ch09: the softmax's -delta term is missing
    a = torch.exp(q @ k.T * scale - lse)
    dz = a * (d_out @ v.T)
    return dz @ k * scale, dz.T @ q * scale, a.T @ d_out


def no_scale(q, k, v, out, lse, d_out, scale):  # ch09: the scale's chain rule forgotten
    dq, dk, dv = attention_backward(q, k, v, out, lse, d_out, scale)
    return dq / scale, dk / scale, dv


def unnormalised(q, k, v, out, lse, d_out, scale):  # ch09: exp(scores) without the lse
    return attention_backward(q, k, v, out, torch.zeros_like(lse), d_out, scale)


def two_pass_logsumexp(x, block_size):  # ch09: the whole row's maximum first, then blocks
    row_max = x.amax(dim=-1)
    total = x.new_zeros(x.shape[:-1])
    for start in range(0, x.size(-1), block_size):
        total = total + torch.exp(x[..., start : start + block_size] - row_max[..., None]).sum(-1)
    return row_max + torch.log(total)


def softmax_backward(q, k, v, out, lse, d_out, scale):  # ch09: the weights from a softmax call
    a = torch.softmax(q @ k.T * scale, dim=-1)
    delta = (d_out * out).sum(dim=-1, keepdim=True)
    dz = a * (d_out @ v.T - delta)
    return dz @ k * scale, dz.T @ q * scale, a.T @ d_out


def autograd_backward(q, k, v, out, lse, d_out, scale):  # ch09: autograd does the work
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        result = torch.softmax(leaves[0] @ leaves[1].T * scale, dim=-1) @ leaves[2]
        return torch.autograd.grad(result, leaves, d_out)


def unguarded(out_a, lse_a, out_b, lse_b):  # ch10: NaN when both sides are empty
    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * torch.exp(lse_a - lse) + out_b * torch.exp(lse_b - lse), lse


def empty_lse_zero(out_a, lse_a, out_b, lse_b):  # ch10: an empty row gets lse 0, not -inf
    new_max = torch.maximum(lse_a, lse_b)
    safe_max = torch.where(new_max == float("-inf"), 0.0, new_max)
    weight_a, weight_b = torch.exp(lse_a - safe_max), torch.exp(lse_b - safe_max)
    total = weight_a + weight_b
    safe_total = torch.where(total > 0, total, 1.0)
    return (out_a * weight_a + out_b * weight_b) / safe_total, safe_max + torch.log(safe_total)


def through_exp(out_a, lse_a, out_b, lse_b):  # ch10: exp(lse) directly, which overflows
    weight_a, weight_b = torch.exp(lse_a), torch.exp(lse_b)
    total = weight_a + weight_b
    safe_total = torch.where(total > 0, total, 1.0)
    return (out_a * weight_a + out_b * weight_b) / safe_total, torch.log(total)


def keys_built(layer, x, latents):  # ch11: every key built from k_up's weight, not k_up
    q = layer.q_proj(x).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
    k = (latents @ layer.k_up.weight.T).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
    return q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)


def keys_per_head(layer, x, latents):  # ch11: one head's keys at a time
    q = layer.q_proj(x).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
    w_uk = layer.k_up.weight.view(layer.n_heads, layer.head_dim, -1)
    heads = [q[:, h] @ (latents @ w_uk[h].T).transpose(-2, -1) for h in range(layer.n_heads)]
    return torch.stack(heads, dim=1) / math.sqrt(layer.head_dim)


def calls_k_up(layer, x, latents):  # ch11: the explicit form
    q = layer.q_proj(x).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
    k = layer.k_up(latents).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
    return q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)


def keys_only(model):  # ch12: forgets the values
    attention = model.blocks[0].attention
    if hasattr(attention, "kv_latent_dim"):
        return cache_bytes_per_token(model)
    return len(model.blocks) * attention.n_kv_heads * attention.head_dim * 4


def query_heads(model):  # ch12: counts H instead of H_kv
    attention = model.blocks[0].attention
    if hasattr(attention, "kv_latent_dim"):
        return cache_bytes_per_token(model)
    return len(model.blocks) * 2 * attention.n_heads * attention.head_dim * 4


def no_rope(model):  # ch12: forgets MLA's rotary key
    attention = model.blocks[0].attention
    if hasattr(attention, "kv_latent_dim"):
        return len(model.blocks) * attention.kv_latent_dim * 4
    return cache_bytes_per_token(model)


def word_start_weight(weights, windows, space, *, shift=0, first=False, late=False, **how):
    """ch12 exercise 3 with one mistake: the key before the word start (shift=-1), the first
    separator (first), separators up to t - 2 only (late), queries with no separator counted
    as 0 or as key 0 (missing="zero"/"key0"), each window averaged first (per_window), the
    queries on a word's first letter left out (skip_own), the queries on a separator left out
    (skip_separators), the space alone (space_only), or row[-1] read at t = 0 (wrap)."""
    if how.get("space_only"):
        space = space[:1]
    means, total, count = [], 0, 0
    for b, row in enumerate(windows.tolist()):
        row_total, row_count, start = 0, 0, None
        for t in range(len(row)):
            after_space = (t > 0 or how.get("wrap")) and row[t - 1] in space
            if after_space and not late and not (first and start is not None):
                start = t
            left_out = start is not None and how.get("skip_separators") and row[t] in space
            if (start == t and how.get("skip_own")) or left_out:
                pass
            elif start is not None:
                row_total, row_count = row_total + weights[:, b, :, t, start + shift], row_count + 1
            elif how.get("missing") == "zero":
                row_count += 1
            elif how.get("missing") == "key0":
                row_total, row_count = row_total + weights[:, b, :, t, 0], row_count + 1
            if after_space and late:
                start = t
        means.append(row_total / row_count)
        total, count = total + row_total, count + row_count
    return torch.stack(means).mean(0) if how.get("per_window") else total / count


def start_of_word_rolled(weights, windows, space):  # ch12: torch.roll wraps t = 0 around
    previous = torch.roll(windows, 1, dims=1)  # (B, T): windows[b, t - 1], and T - 1 at t = 0
    after = torch.isin(previous, torch.tensor(space))  # (B, T): s follows a separator
    positions = torch.arange(windows.size(1)).expand_as(windows)  # (B, T)
    start = torch.where(after, positions, -1).cummax(dim=1).values  # (B, T): latest s <= t
    b, t = torch.nonzero(start >= 0, as_tuple=True)
    return weights[:, b, :, t, start[b, t]].mean(dim=0)  # (N, L, H) -> (L, H)


def space_onward(weights, windows, space):  # ch12: reads the space itself, from the space on
    total, count = 0, 0
    for b, row in enumerate(windows.tolist()):
        start = None
        for t, token in enumerate(row):
            if token in space:
                start = t
            if start is not None:
                total, count = total + weights[:, b, :, t, start], count + 1
    return total / count


def batch_gradient(model, inputs, targets, absolute=True):  # ch13: one gradient of the batch
    n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
    gates = torch.ones(n_layers, n_heads, dtype=torch.float64, requires_grad=True)
    logits = model(inputs, head_mask=gates)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    gradient = torch.autograd.grad(loss, gates)[0]
    return gradient.abs() if absolute else gradient


def summed_loss(model, inputs, targets):  # ch13: a window's loss summed over positions
    n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for window, target in zip(inputs, targets, strict=True):
        gates = torch.ones(n_layers, n_heads, dtype=torch.float64, requires_grad=True)
        logits = model(window[None], head_mask=gates)
        loss = torch.nn.functional.cross_entropy(logits[0], target, reduction="sum")
        total += torch.autograd.grad(loss, gates)[0].abs()
    return total / len(inputs)


def circuit_scores(model, period=10):
    """Per-head scores on chapter 14's two-block sequences, as find_circuit takes them."""
    block = torch.randint(0, 64, (32, period), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([torch.full((32, 1), 64), block, block], dim=1)  # (B, 2P + 1)
    weights = model.attention_weights(tokens)[..., 1:, 1:]  # (L, B, H, 2P, 2P)
    on_copy = weights[1].diagonal(offset=-period, dim1=-2, dim2=-1).mean(dim=(0, 2))  # (H,)
    on_self = weights[0].diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2))  # (H,)
    return (
        previous_token_score(weights[0]).mean(dim=0),
        induction_score(weights[1], period).mean(dim=0),
        on_copy,
        on_self,
    )


def scores_key_t_minus_p(model):  # ch14: the induction score on key t - P
    previous, _, on_copy, _ = circuit_scores(model)
    return previous.argmax().item(), on_copy.argmax().item()


def current_token_head(model):  # ch14: layer 0 scored on key t instead of t - 1
    _, induction, _, on_self = circuit_scores(model)
    return on_self.argmax().item(), induction.argmax().item()


def lowest_previous(model):  # ch14
    previous, induction, _, _ = circuit_scores(model)
    return previous.argmin().item(), induction.argmax().item()


def non_repeating(model):  # ch14: scored on sequences that never repeat
    tokens = torch.randint(0, 64, (32, 21), generator=torch.Generator().manual_seed(0))
    tokens[:, 0] = 64  # BOS, then 20 tokens with no second block
    weights = model.attention_weights(tokens)[..., 1:, 1:]  # (L, B, H, 20, 20)
    previous = previous_token_score(weights[0]).mean(dim=0)  # (H,)
    induction = induction_score(weights[1], 10).mean(dim=0)  # (H,)
    return previous.argmax().item(), induction.argmax().item()


def lowest_both(model):  # ch14: argmin for both heads; layer 1's heads tie in mystery 0
    previous, induction, _, _ = circuit_scores(model)
    return previous.argmin().item(), induction.argmin().item()


def sinks_in_future(T, w, n):  # ch15: sink keys seen before they exist
    return sink_window_mask(T, w, 0) | (torch.arange(T) < n)


def sink_column(scores, sinks):  # ch15: the (H, T, 1) column of sink logits
    return sinks[:, None, None].expand(*scores.shape[:-1], 1)


# (checker, wrong answer, words its hint must contain)
def strict_full(start_m, start_n, block_m, block_n):  # ch16: a tile ending on the query
    if start_n + block_n - 1 < start_m:
        return "full"
    return "skip" if start_n > start_m + block_m - 1 else "diagonal"


def skips_the_last_query(start_m, start_n, block_m, block_n):  # ch16: off by one at the top
    if start_n >= start_m + block_m - 1 and start_n + block_n - 1 > start_m:
        return "skip"
    return causal_tile_kind(start_m, start_n, block_m, block_n)


def only_same_start_is_diagonal(start_m, start_n, block_m, block_n):  # ch16
    if start_n == start_m:
        return "diagonal"
    return "full" if start_n < start_m else "skip"


def overlapping_keys(count, d_k, generator):  # ch18: unit rows, not orthogonal
    return torch.nn.functional.normalize(torch.randn(count, d_k, generator=generator), dim=-1)


def recall_of_every_query(c, t, k):  # ch19: includes the first k queries
    return (t.topk(k, -1).indices[:, :, None] == c[:, None]).any(-1).double().mean(-1)


def recall_without_topk(c, t, k):  # ch19: the k smallest scores
    return (t.argsort(-1)[:, :k, None] == c[:, None]).any(-1).double().mean(-1)[k:]


def recall_as_precision(c, t, k):  # ch19: hits over the picks made, not over k
    hits = (t.topk(k, -1).indices[:, :, None] == c[:, None]).any(-1).double().sum(-1)
    return (hits / (c >= 0).sum(-1).clamp(min=1))[k:]


def recall_one_hot(c, t, k):  # ch19: a one-hot by fancy indexing sends a -1 to key S - 1
    picked = torch.zeros_like(t, dtype=torch.bool)
    picked[torch.arange(t.size(0))[:, None], c] = True  # (T, S)
    return picked.gather(-1, t.topk(k, -1).indices).double().mean(-1)[k:]


def keep_first(source, n_kv_heads, **wrong):  # ch06: the reference, with a mistake switched on
    return SOLUTIONS["check_keep_first_kv_head"](source, n_kv_heads, **wrong)


def keep_first_in_place(source, n_kv_heads):  # ch06: writes the kept heads into the source too
    converted = keep_first(source, n_kv_heads)
    with torch.no_grad():
        source.k_proj.weight[: converted.k_proj.weight.size(0)] = converted.k_proj.weight
    return converted


WRONG_ANSWERS = {
    "check_window_mask": [
        (band, "row 0 may attend to key 1, which is in its future"),
        (lambda T, w: window_mask(T, w + 1), "row 2 may attend to key 0, 2 steps"),
        (lambda T, w: window_mask(T, w).float(), "should return a boolean tensor"),
        (lambda T, w: window_mask(T, w - 1), "row 1 may not attend to key 0, but key 0 is inside"),
        (lambda T, w: ~window_mask(T, w), "row 0 may not attend to key 0"),
    ],
    "check_query_magnitude": [
        (lambda t, n, d: query_magnitude(t, n, d) / math.sqrt(d), "you returned the score"),
        (lambda t, n, d: query_magnitude(t, n, d) * math.sqrt(d), "not 1 / d"),
        (lambda t, n, d: math.sqrt(d) * math.log(t * n / (1 - t)), "n_keys - 1 other keys, not"),
        (lambda t, n, d: math.sqrt(d) * math.log(t / (1 - t)), "adds e^0 = 1"),
        (lambda t, n, d: [query_magnitude(t, n, d)], "should return a number"),
        (lambda t, n, d: query_magnitude(t, n, d) + 0.01, "instead of 0.9"),
    ],
    "check_attention_parameter_count": [
        (lambda D: 2 * D * D + D, "is D x 2D, not D x D"),
        (lambda D: 3 * D * D + 3 * D, "W and U have no biases"),
        (lambda D: 3 * D * D + 4 * D, "W, U and v have no biases"),
        (lambda D: 3 * D * D, "v has D entries"),
        (lambda D: 3 * D**2 + D / 1, "whole number"),
    ],
    "check_concat_scores": [
        (lambda q, k, W, v: concat_scores(q, k, W, v).T, "rows and columns are swapped"),
        (key_first, "stacked as [k; q]"),
        (no_tanh, "the tanh is missing"),
        (lambda q, k, W, v: concat_scores(q, k, W, v) * 1.01, "differ from v^T tanh(W [q; k])"),
    ],
    "check_scale_for": [
        (lambda d, sigma: 1 / (sigma * math.sqrt(d)), "variance sigma^4, not sigma^2"),
        (lambda d, sigma: 1 / math.sqrt(d), "sigma changes the variance too"),
        (lambda d, sigma: 1 / d, "scale_for(16, 0.5) returned 0.0625"),
        # at d = 16, sigma = 0.5 this equals 1/sqrt(d): the hint must still name the square root
        (lambda d, sigma: 1 / (sigma**2 * d), "the square root applies to d as well"),
        (lambda d, sigma: "1", "should return a number, got '1'"),
    ],
    "check_largest_length": [
        (lambda b, H, size: round(math.sqrt(b / (H * size))), "5793 scores of 4 bytes need"),
        (lambda b, H, size: math.sqrt(b / (H * size)), "whole number of tokens (int), got 5792.6"),
        (lambda b, H, size: math.isqrt(b // (H * size * size)), "fits too"),
        (lambda b, H, size: math.isqrt(b // size), "more than the 1,073,741,824 budgeted"),
        (lambda b, H, size: int(math.sqrt(b / (H * size))), "94906267 x 94906267 scores"),
    ],
    "check_zero_query_output": [
        (lambda x, W_v: x @ W_v, "each token's own value"),
        (lambda x, W_v: (x @ W_v).sum(1, keepdim=True).expand(*x.shape[:2], -1), "the sum of"),
        (lambda x, W_v: (x @ W_v).mean(dim=1, keepdim=True), "expected (B, T, d_head)"),
        (lambda x, W_v: (x @ W_v).mean(dim=0, keepdim=True).expand(x.size(0), -1, -1), "differs"),
        (lambda x, W_v: x.mean(dim=1, keepdim=True) @ W_v, "expected (B, T, d_head)"),
    ],
    "check_is_equivariant": [
        (lambda f, x, p: True, "returned True, expected False"),
        (lambda f, x, p: torch.allclose(f(x[:, p]), f(x)), "shuffle the input, then compare"),
        (
            lambda f, x, p: torch.allclose(f(x[:, p]), f(x)[:, p.argsort()]),
            "shuffle the input, then compare",
        ),
        (lambda f, x, p: torch.allclose(f(x)[:, p], f(x)), "returned False, expected True"),
        (lambda f, x, p: (f(x[:, p]) - f(x)[:, p]).abs().max(), "should return True or False"),
        (lambda f, x, p: torch.equal(f(x[:, p]), f(x)[:, p]), "up to float rounding"),
        (
            lambda f, x, p: torch.allclose(
                f(x[:, p]).sort(dim=1).values, f(x)[:, p].sort(dim=1).values
            ),
            "compare position by position",
        ),
    ],
    "check_prefix_lm_mask": [
        (
            lambda T, P: causal_mask(T),
            "blocks row 0 (a prompt token) from key 1, which is in the prompt",
        ),
        (
            lambda T, P: causal_mask(T) | (torch.arange(T) < P)[:, None],
            "lets row 0 (a prompt token) attend to key 2, a generated token in its future",
        ),
        (
            lambda T, P: (torch.arange(T) < P).expand(T, T).clone(),
            "blocks row 2 (a generated token) from key 2, its own position",
        ),
    ],
    "check_head_projection": [
        (lambda mha, role, h: head_projection(mha, "q", h), "(mha, 'k', 0) returned the rows"),
        (whole_block, "expected (d_head, D) = (4, 12)"),
        (wrong_bias, "the bias comes from other rows"),
        (head_major, "(mha, 'q', 1) returned the rows of role 'k', head 0. in_proj_weight stacks"),
    ],
    "check_without_head": [
        (in_place, "changed the layer it was given (out_proj.weight)"),
        (zero_rows, "rows 0 to 3 of out_proj.weight were zeroed"),
        (bias_too, "out_proj.bias changed"),
        (lambda a, h: without_head(a, (h + 1) % a.n_heads), "head 0 is read by columns 0 to 3"),
        (lambda attention, h: 3, "should return a MultiHeadAttention, got int"),
    ],
    "check_repeat_kv": [
        (lambda x, n: x.repeat(1, 1, n, 1), "the order [0, 1, 2, 0, 1, 2], which tiles them"),
        (lambda x, n: x.repeat_interleave(n, dim=1), "expected shape (2, 4, 6, 5)"),
        (transposed_view, "which tiles them"),
        (chapter_recipe, "a new axis before the head axis"),
        (copies_along_s, "the copies went along S; the heads are on axis 2 here"),
        (lambda x, n: x.repeat_interleave(n, dim=2), "uses repeat_interleave, which the exercise"),
        (lambda x, n: torch.stack([x] * n, dim=3).flatten(2, 3), "uses stack"),
        (
            lambda x, n: x[:, :, torch.arange(x.size(2)).repeat_interleave(n)],
            "indexing with a list of heads",
        ),
        (by_broadcast, "never calls expand"),
    ],
    "check_alibi_slopes": [
        (lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)], "for a power of two only"),
        (lambda n: [2 ** (-8 * h / n) for h in range(n)], "the first slope is 2^(-8/n)"),
        (lambda n: alibi_slopes(n)[:-1], "alibi_slopes(8) should return one slope per head, 8"),
        (lambda n: alibi_slopes(n).flip(0), "for n a power of two the slopes are 2^(-8/n)"),
        (wrong_extra_alibi_slopes, "then the 1st, 3rd, 5th, ... slopes of 2n' heads"),
        (lambda n: alibi_slopes(n).sort().values, "for n a power of two the slopes are"),
    ],
    "check_rope_halves": [
        (lambda x, p: apply_rope(x, p, layout="adjacent"), "rotates adjacent pairs (2i, 2i + 1)"),
        (lambda x, p: 2 * rope_halves(x, p), "changes the vectors' lengths"),
        (lambda x, p: rope_halves(x, torch.arange(x.size(-2))), "differs from the halves layout"),
        (lambda x, p: rope_halves(x, -p), "differs from the halves layout"),
    ],
    "check_preallocated_kv_cache": [
        (ReturnsOnlyNew, "after 1 more token, the logits differ"),
        (ConcatenatingCache, "returned keys in new memory"),
        (CountsOneTooMany, "after the 4-token prompt, the logits differ"),
        (CopiesTheValues, "returned values in new memory"),
        (NoRoomCheck, "did not raise (one token at a time): 4 positions do not fit"),
    ],
    "check_online_logsumexp": [
        (no_rescale, "multiply the running sum by exp(old max - new max)"),
        (lambda x, b: torch.log(torch.exp(x).sum(dim=-1)), "is not finite"),
        (lambda x, b: x, "should return one value per row"),
        (max_from_zero, "start the running maximum at -inf, not 0"),
        (lambda x, b: torch.logsumexp(x, dim=-1), "called logsumexp on whole rows of 45"),
        (two_pass_logsumexp, "called amax on whole rows of 45"),
    ],
    "check_attention_backward": [
        (no_row_dot, "dZ = A * (dA - delta)"),
        (no_scale, "multiply dZ by the scale"),
        (unnormalised, "dv is wrong"),
        (softmax_backward, "attention_backward called softmax"),
        (autograd_backward, "attention_backward called requires_grad_"),
    ],
    "check_merge_partials": [
        (lambda a, la, b, lb: ((a + b) / 2, torch.logaddexp(la, lb)), "averaged the two outputs"),
        (unguarded, "must stay 0 (lse -inf), not NaN"),
        (
            lambda a, la, b, lb: (merge_partials(a, la, b, lb)[0], torch.maximum(la, lb)),
            "the lse should be log(exp(lse_a) + exp(lse_b))",
        ),
        (empty_lse_zero, "returned lse [0.0]: a row with no keys has lse log(0) = -inf"),
        (through_exp, "shifted by +1000 is not finite: exp(+1000) overflows"),
    ],
    "check_latent_scores": [
        (lambda *a: latent_scores(*a) * math.sqrt(a[0].head_dim), "forgot the scale"),
        (calls_k_up, "must not call layer.k_up"),
        (keys_built, "built a tensor of shape (2, 7, 24) with matmul: that is keys"),
        (keys_per_head, "built a tensor of shape (2, 7, 6)"),
        (lambda *a: latent_scores(*a).transpose(-2, -1), "should return (B, H, T, S)"),
        (lambda *a: latent_scores(*a).flip(1), "differs from q . k / sqrt(d_head)"),
        (
            lambda *a: latent_scores(*a) * math.sqrt(a[0].head_dim / a[0].kv_latent_dim),
            "scales by 1 / sqrt(d_c)",
        ),
    ],
    "check_cache_bytes_per_token": [
        (keys_only, "a key AND a value per token"),
        (query_heads, "not the query heads"),
        (no_rope, "one rotary key of rope_dim numbers"),
        (
            lambda m: cache_bytes_per_token(m) * 4 // next(m.parameters()).element_size(),
            "8 for float64",
        ),
        (lambda model: 1.5, "should return an int"),
        (
            lambda m: cache_bytes_per_token(m) // len(m.blocks),
            "every layer keeps its own cache: add them all up",
        ),
        (
            lambda m: cache_bytes_per_token(m) // next(m.parameters()).element_size(),
            "counts numbers, not bytes",
        ),
    ],
    "check_start_of_word_weight": [
        (lambda *a: word_start_weight(*a, shift=-1), "the weight on the separator itself"),
        (space_onward, "reads the separator itself, from the separator on"),
        (lambda *a: word_start_weight(*a, first=True), "the first separator of the window"),
        (lambda *a: word_start_weight(*a, space_only=True), "a line break ends a word too"),
        (lambda *a: word_start_weight(*a, late=True), "let s = t count"),
        (lambda *a: word_start_weight(*a, skip_own=True), "keep it, and let s = t count"),
        (
            lambda *a: library_word_start_weight(*a, skip_letters=2),
            "leaves out the queries on a word's first two letters",
        ),
        (
            lambda *a: word_start_weight(*a, skip_separators=True),
            "a query on the space or line break that ends a word still belongs",
        ),
        (lambda *a: word_start_weight(*a, wrap=True), "t = 0 has no previous character"),
        (lambda *a: start_of_word_rolled(*a), "t = 0 has no previous character"),
        (lambda *a: word_start_weight(*a, missing="zero"), "instead of counting them as 0"),
        (lambda *a: word_start_weight(*a, missing="key0"), "rather than reading key 0"),
        (lambda *a: word_start_weight(*a, per_window=True), "not per window"),
        (lambda *a: start_of_word_weight(*a).T, "should return shape (L, H) = (2, 3)"),
        (lambda *a: start_of_word_weight(*a).mean().item(), "should return (L, H), got float"),
    ],
    "check_previous_share": [
        (
            lambda w: torch.cat([w.new_zeros(1), w.diagonal(-1)]).mean(),
            "query 0 has no previous character",
        ),
        (lambda w: w.diagonal().mean().item(), "that is the weight on key i itself"),
        (lambda w: w.diagonal(-1).sum().item(), "that is the sum of weights[i, i - 1]"),
        (lambda w: w.diagonal(1).mean().item(), "key i + 1 is in query i's future"),
    ],
    "check_previous_shares": [
        (lambda *a: previous_shares(*a, skip=False), "query 0 has no previous character"),
        (lambda *a: previous_shares(*a, layer=-1), "those are the last layer's shares"),
        (lambda *a: previous_shares(*a, key=0), "not key i"),
        (
            lambda *a: (previous_shares(*a)[0], 1 / previous_shares(*a)[1]),
            "the ratio is upside down",
        ),
        (
            lambda *a: previous_shares(*a, skip_two=False),
            "queries 0 and 1 have no key two back",
        ),
        (lambda *a: previous_shares(*a)[0], "should return two (H,) tensors"),
        (lambda *a: (previous_shares(*a)[0] * 4, previous_shares(*a)[1]), "4 times too large"),
        (lambda *a: previous_shares_slip(*a, "count"), "averaged over T - 1 queries"),
        (lambda *a: previous_shares_slip(*a, "per_window"), "mean of the per-window ratios"),
    ],
    "check_head_importance": [
        (batch_gradient, "so gradients of opposite signs do not cancel"),
        (lambda *a: batch_gradient(*a, absolute=False), "the importance is an absolute value"),
        (lambda *a: head_importance(*a) * len(a[1]), "that is the sum over the 4 windows"),
        (summed_loss, "a window's loss is its MEAN cross-entropy"),
        (
            lambda *a: head_importance(*a, dtype=torch.float32),
            "make them with dtype=next(model.parameters()).dtype",
        ),
    ],
    "check_supported_orderings": [
        (lambda L: {(b, a) for a, b in supported_orderings(L)}, "the pairs are reversed"),
        (lambda L: supported_orderings(L, n_spreads=0.0), "that ranks by the means alone"),
        (
            lambda L: supported_orderings(L, spread=statistics.pstdev),
            "that uses the population standard deviation",
        ),
        (lambda L: supported_orderings(L, per_seed=False), "that uses +- 2 standard deviations"),
        (lambda L: supported_orderings(L, n_spreads=1.0), "that uses +- 1 standard error"),
        (lambda L: supported_orderings(L, n_spreads=1.96), "that uses +- 1.96 standard errors"),
        (lambda L: supported_orderings(L, n_less=1), "that divides by sqrt(n - 1)"),
        (lambda L: supported_orderings(L, strict=False), "that ranks intervals that only touch"),
        (lambda L: {(1, 4)}, "expected [(2, 1), (8, 1)]: a pair (a, b) belongs"),
        (lambda L: 3, "should return a set of pairs (a, b), got int"),
    ],
    "check_induction_share": [
        (lambda w, p: w.diagonal(offset=-p).mean().item(), "the earlier copy of the current"),
        (
            lambda w, p: w.diagonal(offset=-(p - 1))[1:].sum().item() / len(w),
            "average over the 5 queries t = period .. T - 1 only",
        ),
        (
            lambda w, p: w.diagonal(offset=-(p - 1)).mean().item(),
            "queries t < period have no earlier copy",
        ),
        (lambda w, p: "0.5", "should return one number, got str"),
        (lambda w, p: 0.5, "returned 0.5000, expected"),
    ],
    "check_find_circuit": [
        (lambda model: find_circuit(model)[::-1], "the order is (previous-token head"),
        (lowest_previous, "That is the lowest score of the layer"),
        (lowest_both, "That is the lowest score of the layer"),
        (current_token_head, "the most weight on key t itself"),
        (scores_key_t_minus_p, "the most weight on key t - period, the earlier copy"),
        # in the mystery models with switched-off heads, this picks the same uniform head as
        # scoring key t - P, so the hint names that key only as a possibility
        (non_repeating, "if that is the key you scored, an induction head looks one key"),
        (lambda model: (0, 3), "That is the lowest score of the layer; take the highest"),
        (lambda model: 3, "should return two head numbers"),
        (lambda model: (0.0, 1.0), "should return two ints"),
        (lambda model: (4, 0), "each layer has heads 0 to 3"),
    ],
    "check_sink_window_mask": [
        (sinks_in_future, "row 0 may attend to key 1, which is in its future"),
        (lambda T, w, n: sink_window_mask(T, w, 0), "row 2 may not attend to key 0, one of the"),
        (lambda T, w, n: sink_window_mask(T, w + 1, n), "row 3 may attend to key 1, 2 steps back"),
        (lambda T, w, n: sink_window_mask(T, w - 1, n), "which is inside its window"),
        (lambda T, w, n: 0, "should return a boolean tensor, got int"),
    ],
    "check_sink_weights": [
        (lambda s, k: s.softmax(-1), "every row sums to 1, so the sink took nothing"),
        (
            lambda s, k: torch.cat([s, sink_column(s, k)], -1).softmax(-1),
            "drop the sink's column after the softmax",
        ),
        (
            lambda s, k: torch.cat([s, sink_column(s, k)], -1).softmax(-1)[..., 1:],
            "[..., 1:] drops key 0",
        ),
        (
            lambda s, k: torch.cat([sink_column(s, k), s], -1).softmax(-1)[..., :-1],
            "the sink column is put first, but the last column",
        ),
        (
            lambda s, k: s.softmax(-1) * torch.sigmoid(sink_column(s, k) - s.logsumexp(-1, True)),
            "the rescaling factor is the keys' share sigma(lse - s_h)",
        ),
        (lambda s, k: weights_with_sink(s, -k), "the sink's logit has the wrong sign"),
        (lambda s, k: torch.tensor(0.0), "should return shape (H, T, S) = (3, 4, 5), got ()"),
    ],
    "check_receptive_field": [
        (lambda ws, T: min(T, len(ws) * (ws[0] - 1) + 1), "add each layer's own W - 1"),
        (lambda ws, T: min(T, sum(ws)), "each layer reaches window - 1"),
        (lambda ws, T: sum(w - 1 for w in ws) + 1, "no more than the 20 positions"),
        (
            lambda ws, T: receptive_field([w for w in ws if w is not None], T),
            "a global layer lets the last position see every earlier",
        ),
        (lambda ws, T: float(T), "should return an int, got float"),
    ],
    "check_causal_tile_kind": [
        (strict_full, "causal_tile_kind(4, 1, 4, 4) returned 'diagonal', expected 'full'"),
        (
            lambda m, n, bm, bn: causal_tile_kind(m, n, bm, bm),
            "causal_tile_kind(8, 4, 8, 4) returned 'diagonal', expected 'full'",
        ),
        (skips_the_last_query, "returned 'skip', expected 'diagonal': some of keys"),
        (only_same_start_is_diagonal, "(8, 12, 8, 4) returned 'skip', expected 'diagonal'"),
        (lambda *args: "masked", "should return one of ('full', 'diagonal', 'skip')"),
    ],
    "check_causal_flash": [
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, masked=False, skips=False),
            "the output differs from causal SDPA",
        ),
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, skips=False),
            "read all 16 tiles: the output is right",
        ),
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, strict=True),
            "returned inf or NaN: a row whose every key is masked",
        ),
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, masked=False),
            "the output differs from causal SDPA",
        ),
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, stop="first_row"),
            "causal_flash(q, k, v, 32, 16) with T = S = 50, 2 heads: the output differs",
        ),
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, stop="one_key_block"),
            "causal_flash(q, k, v, 32, 16) with T = S = 50, 2 heads: the output differs",
        ),
        (
            lambda q, k, v, bm, bn: causal_flash(q, k, v, bm, bn, one_head=True),
            "read 6 tiles, the count of one head",
        ),
        (lambda q, k, v, bm, bn: q, "should return a pair (out, tiles)"),
    ],
    "check_flash_exp2": [
        (lambda q, k, v: flash_exp2(q, k, v, fold=False), "the output differs from SDPA"),
        (lambda q, k, v: flash_exp2(q, k, v, factor=1.0), "lse is still the base-2 value"),
        (
            lambda q, k, v: flash_exp2(q, k, v, factor=math.log2(math.e)),
            "lse differs from torch.logsumexp",
        ),
        (lambda q, k, v: flash_exp2(q, k, v, log2=False), "lse differs from torch.logsumexp"),
    ],
    "check_delta_rows": [
        (lambda o, do: delta_rows(o, do, one_head=True), "head 0 is right but head 1 is not"),
        (lambda o, do: delta_rows(o, do, floor=True), "rows 32..49 are wrong, the first 32 right"),
        (lambda o, do: delta_rows(o, do, square=True), "delta differs from rowsum(A * dA)"),
        (lambda o, do: (o * do).sum(dim=-1, keepdim=True), "should return delta of shape"),
    ],
    "check_dq_kernel": [
        (lambda q, k, v, do: small_dq(q, k, v, do, scaled=False), "dq is 4 times SDPA's"),
        (lambda q, k, v, do: small_dq(q, k, v, do, delta=False), "subtract each row's delta"),
        (lambda q, k, v, do: small_dq(q, k, v, do, one_head=True), "head 0 is right but head 1"),
        (lambda q, k, v, do: small_dq(q, k, v, do, floor=True), "rows 32..49 are wrong"),
        (lambda q, k, v, do: small_dq(q, k, v, do)[..., :8], "should return dq of shape"),
        (lambda q, k, v, do: torch.zeros_like(q), "differs from SDPA's autograd"),
    ],
    "check_paged_slots": [
        (lambda n, b: b * (n // b), "round the length *up*"),
        (lambda n, b: b * (n // b + 1), "needs no extra block"),
        (lambda n, b: n, "paged_slots(1, 4) should be 4, got 1"),
    ],
    "check_gather_keys": [
        (lambda p, t, n: gather_keys(p, sorted(t), n), "blocks are read in the table's order"),
        (lambda p, t, n: p[t].reshape(-1, p.size(-1)), "should have shape (10, 3)"),
        (lambda p, t, n: p[t].transpose(0, 1).reshape(-1, p.size(-1))[:n], "position 1"),
    ],
    "check_beam_blocks": [
        (lambda p, n, k, b: n * -(-(p + k) // b), "each beam but the last copies it"),
        (
            lambda p, n, k, b: beam_blocks(p, n, k, b) - bool(p % b and k and n > 1),
            "each beam but the last copies it",
        ),
        (
            lambda p, n, k, b: beam_blocks(p, n, max(k, 1), b),
            "beam_blocks(30, 4, 0, 8) should be 4",
        ),
        (
            lambda p, n, k, b: (
                beam_blocks(p, n, k, b) + n * (-(-k // b) - (-(-(p + k) // b) + (p // -b)))
            ),
            "count its new blocks from prompt_len + n_new",
        ),
    ],
    "check_block_hashes": [
        (
            lambda t, b: [hash(tuple(t[i : i + b])) for i in range(0, len(t) - b + 1, b)],
            "must cover them too",
        ),
        (
            lambda t, b: [hash(tuple(t[: i + b])) for i in range(0, len(t), b)],
            "one per *full* block",
        ),
        (lambda t, b: [hash(tuple(t))] * (len(t) // b), "so hash 0 should match"),
        (
            lambda t, b: [sum(t[: i + b]) for i in range(0, len(t) - b + 1, b)],
            "and on their order",
        ),
        (  # block i's hash leaves out its last token
            lambda t, b: [hash(tuple(t[: i + b - 1])) for i in range(0, len(t) - b + 1, b)],
            "hash 1 should differ",
        ),
    ],
    "check_delta_rule_step": [
        (lambda S, k, v, a, b: a * S + b * torch.outer(k, v), "linear attention's write"),
        (
            lambda S, k, v, a, b: a * S + b * torch.outer(k, v - S.T @ k),
            "reads S before its decay",
        ),
        (
            lambda S, k, v, a, b: S + b * torch.outer(k, v - S.T @ k),
            "multiply the old state by alpha",
        ),
        (
            lambda S, k, v, a, b: delta_rule_step(S, k, v, a, b).T,
            "shape (d_k, d_v) = (4, 3)",
        ),
        (
            lambda S, k, v, a, b: a * (S + b * torch.outer(k, v - S.T @ k)),
            "you decayed after writing",
        ),
    ],
    "check_erase_gain": [
        (lambda n, b: 1 - b * n**2, "can be negative"),
        (lambda n, b: abs(1 - b * n**2), "never below 1"),
        (lambda n, b: max(1.0, abs(1 - b * n)), "square of the key's length"),
        (lambda n, b: torch.ones(2), "one number"),
        (lambda n, b: "1", "should return a number"),
        (lambda n, b: 1.0, "expected 8"),
    ],
    "check_orthonormal_keys": [
        (overlapping_keys, "have unit length but overlap"),
        (lambda P, d, g: orthonormal_keys(P, d, g).T, "one key per row"),
        (lambda P, d, g: 2 * orthonormal_keys(P, d, g), "orthogonal but not of unit length"),
        (
            lambda P, d, g: torch.randn(P, d, generator=g) / torch.randn(P, d).norm(dim=0),
            "must have length 1",
        ),
        (lambda P, d, g: torch.eye(d, dtype=torch.float64)[:P], "the keys must be random"),
        (lambda P, d, g: orthonormal_keys(P, d, None), "same seed gave different keys"),
    ],
    "check_chunk_end_state": [
        (lambda S, K, U, g: g[-1] * S + K.T @ U, "pairs were not faded"),
        (lambda S, K, U, g: g[-1] * S + (K * g[:, None]).T @ U, "faded pair i by gamma_i"),
        (
            lambda S, K, U, g: (
                g[-1] * S + (K * (g[-1] / torch.cat([g.new_ones(1), g[:-1]]))[:, None]).T @ U
            ),
            "by its own alpha_i",
        ),
        (lambda S, K, U, g: S + (K * (g[-1] / g)[:, None]).T @ U, "S_0 was not faded"),
        (lambda S, K, U, g: chunk_end_state(S, K, U, g).T, "shape (d_k, d_v) = (4, 3)"),
        (lambda S, K, U, g: g[-1] * S + K.T @ U * g[-1], "expected gated_delta_rule's"),
    ],
    "check_moba_choice": [
        (lambda q, k, b, n: moba_choice(q, k, b, n, causal=False), "later in its own block"),
        (lambda q, k, b, n: moba_choice(q, k, b, n, own=False), "must read its own block"),
        (lambda q, k, b, n: moba_choice(q, k, b, n, extra=1), "top_k = 2 counts its own block"),
        (lambda q, k, b, n: moba_choice(q, k, b, n, extra=-1), "too few blocks: top_k = 2 counts"),
        (lambda q, k, b, n: moba_choice(q, k, b, n, future=False), "a future block took one"),
    ],
    "check_recall": [
        (recall_of_every_query, "should return one recall per query"),
        (lambda c, t, k: recall(c, t, k) * k, "a recall is a share"),
        (recall_without_topk, "compare the chosen ids"),
        (recall_as_precision, "that is precision"),
        (recall_one_hot, "a -1 used as an index"),
    ],
    "check_indexer_crossover": [
        (lambda h, d, k: indexer_crossover(h, d, k, wrong="or equal"), "exactly as much"),
        (lambda h, d, k: indexer_crossover(h, d, k, wrong="scores only"), "512-number values"),
        (lambda h, d, k: indexer_crossover(h, d, k, wrong="no scales"), "one FP32 scale"),
        (lambda h, d, k: indexer_crossover(h, d, k, wrong="keys per head"), "shared by its"),
        (lambda h, d, k: indexer_crossover(h, d, k)[::-1], "the pair is swapped"),
        (lambda h, d, k: (k * 278528 / (2 * h * d), k * 1152 / (d * 33 / 32)), "whole number"),
    ],
    "check_keep_first_kv_head": [
        (lambda s, n: exercises.ch06.mean_pool_kv_heads(s, n), "is the mean of each group"),
        (lambda s, n: keep_first(s, n, first_heads=True), "not the first of every"),
        (lambda s, n: keep_first(s, n, pick=-1), "keeps source heads [7]"),
        (lambda s, n: keep_first(s, n, pooled_bias=True), "k_proj.bias does not"),
        (lambda s, n: s, "returned a layer with 8 key/value heads"),
        (keep_first_in_place, "changed the layer it was given (k_proj.weight)"),
    ],
}


def loss_without(*args, **wrong):  # ch14: the reference, with a mistake switched on
    return SOLUTIONS["check_repeated_loss_without"](*args, **wrong)


WRONG_ANSWERS["check_repeated_loss_without"] = [
    (lambda m, t, p, h: loss_without(m, t, p, h, first=0), "the mean over every query"),
    (lambda m, t, p, h: loss_without(m, t, p, h, first=p), "that includes query `period`"),
    (lambda m, t, p, h: loss_without(m, t, p, h, layer=1), "gates the heads of layer 1"),
    (
        lambda m, t, p, h: loss_without(m, t, p, [x for x in range(4) if x not in h]),
        "removes every other layer-0 head",
    ),
    (lambda m, t, p, h: loss_without(m, t, p, []), "the loss with every head in place"),
    (lambda m, t, p, h: loss_without(m, t, p, h, shift=0), "predict token t + 1"),
    (lambda m, t, p, h: loss_without(m, t, p, h, first=p + 2), "returned 4.453, expected 4.423"),
    (lambda m, t, p, h: str(loss_without(m, t, p, h)), "should return one number, got str"),
]
# Chapter 16's kernel exercises run the reader's Triton: only where Triton installs.
TRITON_CHECKERS = {"check_causal_flash", "check_flash_exp2"}
TRITON_CHECKERS |= {"check_delta_rows", "check_dq_kernel"}


@pytest.fixture(autouse=True)
def _skip_triton_checkers_without_triton(request):
    callspec = getattr(request.node, "callspec", None)
    needs_triton = callspec and callspec.params.get("name") in TRITON_CHECKERS
    if needs_triton and not runtime.has_triton_wheel():
        pytest.skip(f"triton has no wheel for {runtime.platform_name()}")


CASES = [
    pytest.param(name, wrong, words, id=f"{name}-{index}")
    for name, answers in WRONG_ANSWERS.items()
    for index, (wrong, words) in enumerate(answers)
]


def test_every_checker_has_a_reference_answer_and_three_wrong_ones():
    assert sorted(SOLUTIONS) == sorted(CHECKERS)
    assert sorted(WRONG_ANSWERS) == sorted(CHECKERS)
    assert all(len(answers) >= 3 for answers in WRONG_ANSWERS.values())


@pytest.mark.parametrize("name", CHECKERS)
def test_the_reference_answer_is_accepted(name, capsys):
    expect_success(getattr(exercises, name), SOLUTIONS[name], capsys)


@pytest.mark.parametrize(("name", "wrong", "words"), CASES)
def test_a_wrong_answer_gets_a_hint_naming_its_mistake(name, wrong, words):
    expect_message(getattr(exercises, name), wrong, words)


@pytest.mark.parametrize("name", CHECKERS)
def test_checkers_leave_the_global_random_state_alone(name, capsys):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    getattr(exercises, name)(SOLUTIONS[name])
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def in_float64(fn):
    """The reader's function, run on float64 copies of its tensor arguments."""

    def as_float64(arg):
        return arg.double() if torch.is_tensor(arg) and arg.is_floating_point() else arg

    def run(*args):
        return fn(*map(as_float64, args))

    return run


@pytest.mark.parametrize(
    "name",
    ["check_concat_scores", "check_online_logsumexp", "check_rope_halves", "check_merge_partials"],
)
def test_an_answer_computed_in_float64_is_accepted(name, capsys):
    expect_success(getattr(exercises, name), in_float64(SOLUTIONS[name]), capsys)


def stub(*args):
    """What a learner's cell holds before the exercise is attempted."""
    raise NotImplementedError("exercise: write this function")


@pytest.mark.parametrize("name", CHECKERS)
def test_checking_the_stub_says_not_attempted_instead_of_failing(name, capsys):
    getattr(exercises, name)(stub)
    assert capsys.readouterr().out.startswith("Not attempted yet: stub still raises")


def test_reader_errors_are_reported_with_the_call():
    def crashes(T, width):
        raise IndexError("index 6 is out of bounds")

    expect_message(
        exercises.check_window_mask, crashes, "window_mask(6, 2) raised IndexError: index 6"
    )


def test_check_dq_kernel_refuses_what_is_not_a_function():
    with pytest.raises(ValueError, match="fn: expected a function small_dq"):
        exercises.check_dq_kernel(torch.zeros(3))


def test_find_circuit_names_a_mistaken_key_only_if_every_model_shows_it():
    # (0, 3) is, in one mystery model only, the head with the most weight on key t itself
    with pytest.raises(ExerciseError) as raised:
        exercises.check_find_circuit(lambda model: (0, 3))
    assert "the most weight on" not in str(raised.value)


def test_a_wrong_answer_that_raises_something_else_still_fails():
    def broken(T, width):
        raise RuntimeError("oops")

    expect_message(exercises.check_window_mask, broken, "raised RuntimeError: oops")


# Correct answers in other forms than the reference one.


def test_other_correct_forms_are_accepted(capsys):
    check = exercises
    expect_success(check.check_alibi_slopes, lambda n: alibi_slopes(n).tolist(), capsys)
    expect_success(check.check_scale_for, lambda d, s: torch.tensor(1 / (s**2 * d**0.5)), capsys)
    expect_success(
        check.check_supported_orderings, lambda L: sorted(supported_orderings(L)), capsys
    )
    expect_success(
        check.check_repeat_kv,
        lambda x, n: x.unsqueeze(3).expand(-1, -1, -1, n, -1).flatten(2, 3),
        capsys,
    )

    def lse_rescaled(s, k):  # chapter 15's other form: softmax over S, then sigma(lse - s)
        return s.softmax(-1) * torch.sigmoid(s.logsumexp(-1, True) - sink_column(s, k))

    expect_success(check.check_sink_weights, lse_rescaled, capsys)


def test_check_repeat_kv_names_the_learners_function():
    def repeat_kv_by_expand(x, n_repeats):  # the exercise's name, tiling instead of grouping
        return x.repeat(1, 1, n_repeats, 1)

    expect_message(
        exercises.check_repeat_kv,
        repeat_kv_by_expand,
        "repeat_kv_by_expand(x of shape (2, 4, 3, 5), 2) with heads named 0, 1, 2",
    )


def test_a_cache_with_its_own_buffer_names_is_accepted(capsys):
    from exercise_answers import OwnBufferNames

    expect_success(exercises.check_preallocated_kv_cache, OwnBufferNames, capsys)


def test_an_einsum_that_never_builds_the_keys_is_accepted(capsys):
    def by_einsum(layer, x, latents):
        q = layer.q_proj(x).unflatten(-1, (layer.n_heads, layer.head_dim))  # (B, T, H, d_head)
        w_uk = layer.k_up.weight.view(layer.n_heads, layer.head_dim, -1)  # (H, d_head, d_c)
        q_latent = torch.einsum("bthd,hdc->bhtc", q, w_uk)  # (B, H, T, d_c)
        return q_latent @ latents[:, None].transpose(-2, -1) / math.sqrt(layer.head_dim)

    expect_success(exercises.check_latent_scores, by_einsum, capsys)


# Chapter 14: the circuit is found at any period the exercise allows.


def find_circuit_at(period, seed=0, *, full_length=False):
    """The chapter's solution at another period; full_length: periodic_batch's 33 tokens."""

    def find(model):
        generator = torch.Generator().manual_seed(seed)
        if full_length:
            tokens = periodic_batch(torch.full((32,), period), generator)  # (B, 33)
        else:
            block = torch.randint(0, 64, (32, period), generator=generator)  # (B, P)
            tokens = torch.cat([torch.full((32, 1), 64), block, block], dim=1)  # (B, 2P + 1)
        weights = model.attention_weights(tokens)[..., 1:, 1:]
        previous = previous_token_score(weights[0]).mean(dim=0).argmax().item()
        return previous, induction_score(weights[1], period).mean(dim=0).argmax().item()

    return find


@pytest.mark.parametrize("period", range(4, 17))
def test_find_circuit_accepts_the_solution_at_every_period(period, capsys):
    expect_success(exercises.check_find_circuit, find_circuit_at(period), capsys)
    expect_success(
        exercises.check_find_circuit, find_circuit_at(period, 1, full_length=True), capsys
    )


def test_permuting_heads_keeps_the_model_s_output():
    from attnbook.analysis.circuits import load_circuit_models

    models, _ = load_circuit_models()
    model = models["random/600"]
    tokens = periodic_batch(torch.full((4,), 7), torch.Generator().manual_seed(0))
    permuted = copy.deepcopy(model)
    ch14._permute_heads(permuted, 0, [2, 0, 3, 1])
    ch14._permute_heads(permuted, 1, [1, 3, 0, 2])
    torch.testing.assert_close(permuted(tokens), model(tokens), rtol=1e-5, atol=1e-5)
    weights, permuted_weights = model.attention_weights(tokens), permuted.attention_weights(tokens)
    torch.testing.assert_close(permuted_weights[0, :, 0], weights[0, :, 2])
    torch.testing.assert_close(permuted_weights[1, :, 3], weights[1, :, 2])


def test_switched_off_heads_spread_their_weight_evenly():
    from attnbook.analysis.circuits import load_circuit_models

    models, _ = load_circuit_models()
    model = copy.deepcopy(models["random/600"])
    ch14._switch_off_queries(model, 1, [0, 3])
    weights = model.attention_weights(periodic_batch(torch.full((2,), 5), torch.Generator()))
    uniform = causal_mask(33) / torch.arange(1, 34)[:, None]  # (T, T)
    torch.testing.assert_close(weights[1, :, [0, 3]], uniform.expand(2, 2, 33, 33))
    assert not torch.allclose(weights[1, :, 1], uniform)


# Checker messages that say what the learner's answer did, and nothing it did not.


def test_prefix_lm_hint_names_an_earlier_generated_key_it_blocks():
    def prompt_and_diagonal(T, P):
        return (torch.arange(T) < P).expand(T, T) | torch.eye(T, dtype=torch.bool)

    with pytest.raises(ExerciseError, match="blocks row 3 .* from key 2, an earlier generated"):
        exercises.check_prefix_lm_mask(prompt_and_diagonal)


def zero_value_rows(attention, h):  # ch05: a correct answer the solution does not give
    pruned, d_head = copy.deepcopy(attention), attention.head_dim
    with torch.no_grad():
        pruned.v_proj.weight[h * d_head : (h + 1) * d_head] = 0.0
        pruned.v_proj.bias[h * d_head : (h + 1) * d_head] = 0.0
    return pruned


def test_without_head_success_message_fits_what_the_answer_did(capsys):
    exercises.check_without_head(SOLUTIONS["check_without_head"])
    assert "columns of W_o are zeroed" in capsys.readouterr().out
    exercises.check_without_head(zero_value_rows)
    message = capsys.readouterr().out
    assert message.startswith("Correct: head h contributes nothing")
    assert "without zeroing its d_head columns of W_o" in message
