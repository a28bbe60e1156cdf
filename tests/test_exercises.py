"""Each exercise checker accepts the reference solution and explains typical mistakes."""

import copy
import math
import re
import statistics

import pytest
import torch

from attnbook import KVCache, causal_mask, exercises, induction_score, previous_token_score
from attnbook.exercises import ExerciseError, ch14


def expect_message(checker, fn, fragment):
    with pytest.raises(ExerciseError, match=re.escape(fragment)):
        checker(fn)


def expect_success(checker, fn, capsys):
    checker(fn)
    assert capsys.readouterr().out.startswith("Correct: ")


# Chapter 0


def window_mask(T, width):
    return causal_mask(T) & ~torch.ones(T, T, dtype=torch.bool).tril(diagonal=-width)


def test_window_mask(capsys):
    expect_success(exercises.check_window_mask, window_mask, capsys)
    band = lambda T, width: window_mask(T, width) | window_mask(T, width).T  # noqa: E731
    expect_message(
        exercises.check_window_mask, band, "row 0 may attend to key 1, which is in its future"
    )
    one_too_many = lambda T, width: window_mask(T, width + 1)  # noqa: E731
    expect_message(exercises.check_window_mask, one_too_many, "row 2 may attend to key 0, 2 steps")
    as_float = lambda T, width: window_mask(T, width).float()  # noqa: E731
    expect_message(exercises.check_window_mask, as_float, "should return a boolean tensor")
    too_narrow = lambda T, width: window_mask(T, width - 1)  # noqa: E731
    expect_message(
        exercises.check_window_mask,
        too_narrow,
        "row 1 may not attend to key 0, but key 0 is inside its window",
    )


# Chapter 1


def test_attention_parameter_count(capsys):
    expect_success(exercises.check_attention_parameter_count, lambda D: 3 * D * D + D, capsys)
    expect_message(
        exercises.check_attention_parameter_count,
        lambda D: 2 * D * D + D,  # U taken as D x D
        "returned 36, but the attention model has 52 more parameters",
    )
    expect_message(
        exercises.check_attention_parameter_count,
        lambda D: 3 * D * D + 3 * D,  # biases counted
        "(off by 8)",
    )
    expect_message(
        exercises.check_attention_parameter_count, lambda D: 3 * D**2 + D / 1, "whole number"
    )


# Chapter 2


def concat_scores(query, key, W, v):
    T, S = query.size(0), key.size(0)
    pairs = torch.cat(
        [query[:, None, :].expand(T, S, -1), key[None, :, :].expand(T, S, -1)], dim=-1
    )  # (T, S, d_q + d_k)
    return torch.tanh(pairs @ W.T) @ v  # (T, S)


def test_concat_scores(capsys):
    expect_success(exercises.check_concat_scores, concat_scores, capsys)
    expect_message(
        exercises.check_concat_scores,
        lambda q, k, W, v: concat_scores(q, k, W, v).T,
        "rows and columns are swapped",
    )

    def key_first(query, key, W, v):
        T, S = query.size(0), key.size(0)
        pairs = torch.cat(
            [key[None, :, :].expand(T, S, -1), query[:, None, :].expand(T, S, -1)], dim=-1
        )
        return torch.tanh(pairs @ W.T) @ v

    expect_message(exercises.check_concat_scores, key_first, "stacked as [k; q]")

    def no_tanh(query, key, W, v):
        T, S = query.size(0), key.size(0)
        pairs = torch.cat(
            [query[:, None, :].expand(T, S, -1), key[None, :, :].expand(T, S, -1)], dim=-1
        )
        return (pairs @ W.T) @ v

    expect_message(exercises.check_concat_scores, no_tanh, "the tanh is missing")


# Chapter 3


def largest_length(budget, n_heads, size):
    return math.isqrt(budget // (n_heads * size))


def test_largest_length(capsys):
    expect_success(exercises.check_largest_length, largest_length, capsys)
    expect_message(
        exercises.check_largest_length,
        lambda budget, H, size: round(math.sqrt(budget / (H * size))),  # rounds up
        "returned 5793, but 8 x 5793 x 5793 scores of 4 bytes need",
    )
    expect_message(
        exercises.check_largest_length,
        lambda budget, H, size: math.sqrt(budget / (H * size)),
        "should return a whole number of tokens (int), got 5792.6",
    )
    expect_message(
        exercises.check_largest_length,
        lambda budget, H, size: math.isqrt(budget // (H * size * size)),  # bytes counted twice
        "fits too",
    )


# Chapter 4


def prefix_lm_mask(T, P):
    return causal_mask(T) | (torch.arange(T) < P)


def test_prefix_lm_mask(capsys):
    expect_success(exercises.check_prefix_lm_mask, prefix_lm_mask, capsys)
    expect_message(
        exercises.check_prefix_lm_mask,
        lambda T, P: causal_mask(T),
        "row 0 (a prompt token) may not attend to key 1, which is in the prompt",
    )
    expect_message(
        exercises.check_prefix_lm_mask,
        lambda T, P: causal_mask(T) | (torch.arange(T) < P)[:, None],  # prompt rows see all
        "row 0 (a prompt token) may attend to key 2, a generated token in its future",
    )
    expect_message(
        exercises.check_prefix_lm_mask,
        lambda T, P: (torch.arange(T) < P).expand(T, T).clone(),
        "row 2 (a generated token) may not attend to key 2, an earlier generated token",
    )


# Chapter 5


def head_projection(torch_mha, role, h):
    D, d_head = torch_mha.embed_dim, torch_mha.embed_dim // torch_mha.num_heads
    start = "qkv".index(role) * D + h * d_head
    rows = slice(start, start + d_head)
    return torch_mha.in_proj_weight[rows], torch_mha.in_proj_bias[rows]


def test_head_projection(capsys):
    expect_success(exercises.check_head_projection, head_projection, capsys)

    def ignores_role(torch_mha, role, h):
        return head_projection(torch_mha, "q", h)

    expect_message(
        exercises.check_head_projection, ignores_role, "head_projection(mha, 'k', 0) returned"
    )

    def whole_block(torch_mha, role, h):
        D = torch_mha.embed_dim
        rows = slice("qkv".index(role) * D, ("qkv".index(role) + 1) * D)
        return torch_mha.in_proj_weight[rows], torch_mha.in_proj_bias[rows]

    expect_message(exercises.check_head_projection, whole_block, "expected (d_head, D) = (4, 12)")

    def wrong_bias(torch_mha, role, h):
        weight, _ = head_projection(torch_mha, role, h)
        return weight, torch_mha.in_proj_bias[: weight.size(0)]

    expect_message(exercises.check_head_projection, wrong_bias, "the bias comes from other rows")


# Chapter 6


def repeat_kv(x, n_repeats):
    B, H_kv, S, d_head = x.shape
    return x[:, :, None].expand(B, H_kv, n_repeats, S, d_head).reshape(B, -1, S, d_head)


def test_repeat_kv(capsys):
    expect_success(exercises.check_repeat_kv, repeat_kv, capsys)
    expect_message(
        exercises.check_repeat_kv,
        lambda x, n: x.repeat(1, n, 1, 1),
        "the heads come out in the order [0, 1, 2, 0, 1, 2], which tiles them",
    )
    expect_message(
        exercises.check_repeat_kv,
        lambda x, n: x.repeat_interleave(n, dim=2),
        "expected shape (2, 6, 4, 5) (B, H, S, d_head), got (2, 3, 8, 5)",
    )

    def transposed_view(x, n_repeats):
        B, H_kv, S, d_head = x.shape
        return (
            x[:, :, None]
            .expand(B, H_kv, n_repeats, S, d_head)
            .transpose(1, 2)
            .reshape(B, -1, S, d_head)
        )

    expect_message(exercises.check_repeat_kv, transposed_view, "which tiles them")


def test_reader_errors_are_reported_with_the_call():
    def crashes(T, width):
        raise IndexError("index 6 is out of bounds")

    expect_message(
        exercises.check_window_mask, crashes, "window_mask(6, 2) raised IndexError: index 6"
    )


# Chapter 8


class PreallocatedKVCache(KVCache):
    def __init__(self, max_len):
        super().__init__()
        self.max_len = max_len
        self.length = 0

    def __len__(self):
        return self.length

    def append(self, keys, values):
        if self.keys is None:
            shape = (*keys.shape[:2], self.max_len, keys.shape[3])
            self.key_buffer, self.value_buffer = keys.new_empty(shape), values.new_empty(shape)
        stop = self.length + keys.size(2)
        self.key_buffer[:, :, self.length : stop] = keys
        self.value_buffer[:, :, self.length : stop] = values
        self.length = stop
        self.keys = self.key_buffer[:, :, :stop]
        self.values = self.value_buffer[:, :, :stop]
        return self.keys, self.values


class ReturnsOnlyNew(PreallocatedKVCache):
    def append(self, keys, values):
        super().append(keys, values)
        return keys, values


class ConcatenatingCache(KVCache):
    def __init__(self, max_len):
        super().__init__()


class CountsOneTooMany(PreallocatedKVCache):
    def __len__(self):
        return self.length + 1


class OwnBufferNames(KVCache):
    """A correct preallocated cache that never sets KVCache's ``keys`` and ``values``."""

    def __init__(self, max_len):
        super().__init__()
        self.max_len, self.length, self.k_buf, self.v_buf = max_len, 0, None, None

    def __len__(self):
        return self.length

    def append(self, keys, values):
        if self.k_buf is None:
            shape = (*keys.shape[:2], self.max_len, keys.shape[3])
            self.k_buf, self.v_buf = keys.new_empty(shape), values.new_empty(shape)
        stop = self.length + keys.size(2)
        self.k_buf[:, :, self.length : stop] = keys
        self.v_buf[:, :, self.length : stop] = values
        self.length = stop
        return self.k_buf[:, :, :stop], self.v_buf[:, :, :stop]


def test_preallocated_kv_cache(capsys):
    check = exercises.check_preallocated_kv_cache
    expect_success(check, PreallocatedKVCache, capsys)
    expect_message(check, ReturnsOnlyNew, "after 1 more token, the logits differ")
    expect_message(check, ConcatenatingCache, "append allocated new memory for the keys")
    expect_message(check, CountsOneTooMany, "after the 4-token prompt, the logits differ")
    expect_success(check, OwnBufferNames, capsys)


# Chapter 9


def online_logsumexp(x, block_size):
    running_max = x.new_full(x.shape[:-1], float("-inf"))
    running_sum = x.new_zeros(x.shape[:-1])
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        new_max = torch.maximum(running_max, block.amax(dim=-1))
        rescale = torch.exp(running_max - new_max)
        running_sum = running_sum * rescale + torch.exp(block - new_max[..., None]).sum(dim=-1)
        running_max = new_max
    return running_max + torch.log(running_sum)


def test_online_logsumexp(capsys):
    check = exercises.check_online_logsumexp
    expect_success(check, online_logsumexp, capsys)

    def no_rescale(x, block_size):  # forgets to move the old sum to the new maximum
        running_max = x.new_full(x.shape[:-1], float("-inf"))
        running_sum = x.new_zeros(x.shape[:-1])
        for start in range(0, x.size(-1), block_size):
            block = x[..., start : start + block_size]
            running_max = torch.maximum(running_max, block.amax(dim=-1))
            running_sum = running_sum + torch.exp(block - running_max[..., None]).sum(dim=-1)
        return running_max + torch.log(running_sum)

    expect_message(check, no_rescale, "multiply the running sum by exp(old max - new max)")
    no_max = lambda x, block_size: torch.log(torch.exp(x).sum(dim=-1))  # noqa: E731
    expect_message(check, no_max, "is not finite")
    per_column = lambda x, block_size: x  # noqa: E731
    expect_message(check, per_column, "should return one value per row")

    def max_from_zero(x, block_size):  # the running maximum starts at 0, not -inf
        running_max = x.new_zeros(x.shape[:-1])
        running_sum = x.new_zeros(x.shape[:-1])
        for start in range(0, x.size(-1), block_size):
            block = x[..., start : start + block_size]
            new_max = torch.maximum(running_max, block.amax(dim=-1))
            rescale = torch.exp(running_max - new_max)
            running_sum = running_sum * rescale + torch.exp(block - new_max[..., None]).sum(-1)
            running_max = new_max
        return running_max + torch.log(running_sum)

    expect_message(check, max_from_zero, "start the running maximum at -inf, not 0")


# Chapter 10


def merge_partials(out_a, lse_a, out_b, lse_b):
    new_max = torch.maximum(lse_a, lse_b)
    safe_max = torch.where(new_max == float("-inf"), 0.0, new_max)
    weight_a, weight_b = torch.exp(lse_a - safe_max), torch.exp(lse_b - safe_max)
    total = weight_a + weight_b
    safe_total = torch.where(total > 0, total, 1.0)
    lse = torch.where(total > 0, safe_max + torch.log(safe_total), float("-inf"))
    return (out_a * weight_a + out_b * weight_b) / safe_total, lse


def test_merge_partials(capsys):
    check = exercises.check_merge_partials
    expect_success(check, merge_partials, capsys)
    average = lambda a, la, b, lb: ((a + b) / 2, torch.logaddexp(la, lb))  # noqa: E731
    expect_message(check, average, "averaged the two outputs")

    def unguarded(out_a, lse_a, out_b, lse_b):  # right, but NaN when both sides are empty
        lse = torch.logaddexp(lse_a, lse_b)
        return out_a * torch.exp(lse_a - lse) + out_b * torch.exp(lse_b - lse), lse

    expect_message(check, unguarded, "must stay 0 (lse -inf), not NaN")
    max_lse = lambda a, la, b, lb: merge_partials(a, la, b, lb)[:1] + (torch.maximum(la, lb),)  # noqa: E731
    expect_message(check, max_lse, "the lse should be log(exp(lse_a) + exp(lse_b))")


def rope(x, positions, base=10000.0, sign=1.0):
    dim = x.size(-1)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = (positions[:, None] * frequencies[None, :]).to(x.dtype)  # (T, dim / 2)
    cos, sin = angles.cos(), sign * angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


# Chapter 12


def cache_bytes_per_token(model):
    bytes_per_number = next(model.parameters()).element_size()
    total = 0
    for block in model.blocks:
        attention = block.attention
        if hasattr(attention, "kv_latent_dim"):
            total += (attention.kv_latent_dim + attention.rope_dim) * bytes_per_number
        else:
            total += 2 * attention.n_kv_heads * attention.head_dim * bytes_per_number
    return total


def test_cache_bytes_per_token(capsys):
    check = exercises.check_cache_bytes_per_token
    expect_success(check, cache_bytes_per_token, capsys)

    def keys_only(model):  # forgets the values
        attention = model.blocks[0].attention
        if hasattr(attention, "kv_latent_dim"):
            return cache_bytes_per_token(model)
        return len(model.blocks) * attention.n_kv_heads * attention.head_dim * 4

    def query_heads(model):  # counts H instead of H_kv
        attention = model.blocks[0].attention
        if hasattr(attention, "kv_latent_dim"):
            return cache_bytes_per_token(model)
        return len(model.blocks) * 2 * attention.n_heads * attention.head_dim * 4

    def no_rope(model):  # forgets MLA's rotary key
        attention = model.blocks[0].attention
        if hasattr(attention, "kv_latent_dim"):
            return len(model.blocks) * attention.kv_latent_dim * 4
        return cache_bytes_per_token(model)

    def always_float32(model):  # hard-codes 4 bytes per number
        return cache_bytes_per_token(model) * 4 // next(model.parameters()).element_size()

    expect_message(check, keys_only, "a key AND a value per token")
    expect_message(check, query_heads, "not the query heads")
    expect_message(check, no_rope, "one rotary key of rope_dim numbers")
    expect_message(check, always_float32, "8 for float64")
    expect_message(check, lambda model: 1.5, "should return an int")

    def one_layer(model):  # forgets to add up the layers
        return cache_bytes_per_token(model) // len(model.blocks)

    expect_message(check, one_layer, "every layer keeps its own cache: add them all up")


# Chapter 7


def alibi_slopes(n_heads):
    power = 2 ** math.floor(math.log2(n_heads))
    slopes = [2 ** (-8 * (h + 1) / power) for h in range(power)]
    if power < n_heads:
        slopes += alibi_slopes(2 * power)[0::2][: n_heads - power].tolist()
    return torch.tensor(slopes)


def test_alibi_slopes(capsys):
    check = exercises.check_alibi_slopes
    expect_success(check, alibi_slopes, capsys)
    expect_success(check, lambda n: alibi_slopes(n).tolist(), capsys)  # a list is fine too
    geometric = lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)]  # noqa: E731
    expect_message(check, geometric, "is the rule for a power of two only")
    from_one = lambda n: [2 ** (-8 * h / n) for h in range(n)]  # noqa: E731
    expect_message(check, from_one, "the first slope is 2^(-8/n) (1/2 for 8 heads), not 1")
    one_short = lambda n: alibi_slopes(n)[:-1]  # noqa: E731
    expect_message(check, one_short, "alibi_slopes(8) should return one slope per head, 8, got 7")


# Chapter 13


def previous_share(weights):
    return weights.diagonal(offset=-1).mean().item()


def test_previous_share(capsys):
    check = exercises.check_previous_share
    expect_success(check, previous_share, capsys)
    with_query_zero = lambda w: torch.cat([w.new_zeros(1), w.diagonal(-1)]).mean()  # noqa: E731
    expect_message(check, with_query_zero, "query 0 has no previous character")
    current = lambda w: w.diagonal().mean().item()  # noqa: E731
    expect_message(check, current, "that is the weight on key i itself")


def head_importance(model, inputs, targets):
    n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for window, target in zip(inputs, targets, strict=True):
        gates = torch.ones(n_layers, n_heads, dtype=torch.float64, requires_grad=True)
        logits = model(window[None], head_mask=gates)
        loss = torch.nn.functional.cross_entropy(logits[0], target)
        total += torch.autograd.grad(loss, gates)[0].abs()
    return total / len(inputs)


def test_head_importance(capsys):
    check = exercises.check_head_importance
    expect_success(check, head_importance, capsys)

    def batch_gradient(model, inputs, targets, absolute=True):
        n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
        gates = torch.ones(n_layers, n_heads, dtype=torch.float64, requires_grad=True)
        logits = model(inputs, head_mask=gates)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        gradient = torch.autograd.grad(loss, gates)[0]
        return gradient.abs() if absolute else gradient

    expect_message(check, batch_gradient, "so gradients of opposite signs do not cancel")
    signed = lambda *args: batch_gradient(*args, absolute=False)  # noqa: E731
    expect_message(check, signed, "the importance is an absolute value")


def supported_orderings(losses, spread=statistics.stdev, n_spreads=2.0, per_seed=True):
    def half_width(values):
        return n_spreads * spread(values) / (math.sqrt(len(values)) if per_seed else 1.0)

    upper = {h: statistics.fmean(v) + half_width(v) for h, v in losses.items()}
    lower = {h: statistics.fmean(v) - half_width(v) for h, v in losses.items()}
    return {(a, b) for a in losses for b in losses if a != b and upper[a] < lower[b]}


def test_supported_orderings(capsys):
    check = exercises.check_supported_orderings
    expect_success(check, supported_orderings, capsys)
    expect_success(check, lambda losses: sorted(supported_orderings(losses)), capsys)
    reversed_pairs = lambda losses: {(b, a) for a, b in supported_orderings(losses)}  # noqa: E731
    expect_message(check, reversed_pairs, "the pairs are reversed")
    by_means = lambda losses: supported_orderings(losses, n_spreads=0.0)  # noqa: E731
    expect_message(check, by_means, "that ranks by the means alone")
    population = lambda losses: supported_orderings(losses, spread=statistics.pstdev)  # noqa: E731
    expect_message(check, population, "that uses the population standard deviation")
    two_stds = lambda losses: supported_orderings(losses, per_seed=False)  # noqa: E731
    expect_message(check, two_stds, "that uses +- 2 standard deviations")
    first_case_only = lambda losses: {(1, 4)}  # noqa: E731
    expect_message(check, first_case_only, "expected [(2, 1), (8, 1)]: a pair (a, b) belongs")
    expect_message(check, lambda losses: 3, "should return a set of pairs (a, b), got int")


# Every checker


SOLUTIONS = {
    "check_window_mask": window_mask,
    "check_attention_parameter_count": lambda D: 3 * D * D + D,
    "check_concat_scores": concat_scores,
    "check_largest_length": largest_length,
    "check_prefix_lm_mask": prefix_lm_mask,
    "check_head_projection": head_projection,
    "check_repeat_kv": repeat_kv,
    "check_preallocated_kv_cache": PreallocatedKVCache,
    "check_online_logsumexp": online_logsumexp,
    "check_merge_partials": merge_partials,
    "check_alibi_slopes": alibi_slopes,
    "check_cache_bytes_per_token": cache_bytes_per_token,
    "check_previous_share": previous_share,
    "check_head_importance": head_importance,
    "check_supported_orderings": supported_orderings,
}
CHECKERS = [name for name in exercises.__all__ if name.startswith("check_")]


def test_every_checker_has_a_reference_solution_here():
    assert sorted(SOLUTIONS) == sorted(CHECKERS)


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
    "name", ["check_concat_scores", "check_online_logsumexp", "check_rope_halves"]
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


def test_a_wrong_answer_that_raises_something_else_still_fails():
    def broken(T, width):
        raise RuntimeError("oops")

    expect_message(exercises.check_window_mask, broken, "raised RuntimeError: oops")


# Chapter 2: scale_for (the ch00_03 round).


def scale_for(d, sigma):
    return 1.0 / (sigma**2 * math.sqrt(d))


SOLUTIONS["check_scale_for"] = scale_for


def test_check_scale_for(capsys):
    check = exercises.check_scale_for
    expect_success(check, scale_for, capsys)
    expect_success(check, lambda d, sigma: torch.tensor(scale_for(d, sigma)), capsys)
    expect_message(
        check, lambda d, sigma: 1 / (sigma * math.sqrt(d)), "variance sigma^4, not sigma^2"
    )
    expect_message(check, lambda d, sigma: 1 / math.sqrt(d), "sigma changes the variance too")
    expect_message(check, lambda d, sigma: 1 / d, "scale_for(16, 0.5) returned 0.0625")
    expect_message(check, lambda d, sigma: "1", "should return a number, got '1'")


# Chapter 5: without_head


def without_head(attention, h):
    import copy

    pruned = copy.deepcopy(attention)
    d_head = attention.head_dim
    with torch.no_grad():
        pruned.out_proj.weight[:, h * d_head : (h + 1) * d_head] = 0.0
    return pruned


def test_without_head(capsys):
    import copy

    check = exercises.check_without_head
    expect_success(check, without_head, capsys)

    def in_place(attention, h):
        d_head = attention.head_dim
        with torch.no_grad():
            attention.out_proj.weight[:, h * d_head : (h + 1) * d_head] = 0.0
        return attention

    def zero_rows(attention, h):
        pruned, d_head = copy.deepcopy(attention), attention.head_dim
        with torch.no_grad():
            pruned.out_proj.weight[h * d_head : (h + 1) * d_head] = 0.0
        return pruned

    def bias_too(attention, h):
        pruned = without_head(attention, h)
        with torch.no_grad():
            pruned.out_proj.bias.zero_()
        return pruned

    def next_head(attention, h):
        return without_head(attention, (h + 1) % attention.n_heads)

    expect_message(check, in_place, "changed the layer it was given (out_proj.weight)")
    expect_message(check, zero_rows, "rows 0 to 3 of out_proj.weight were zeroed")
    expect_message(check, bias_too, "out_proj.bias changed")
    expect_message(check, next_head, "head 0 is read by columns 0 to 3")
    expect_message(check, lambda attention, h: 3, "should return a MultiHeadAttention, got int")


SOLUTIONS["check_without_head"] = without_head

# Chapter 15


def sink_window_mask(T, window, n_sink):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return ((j <= i) & (j > i - window)) | ((j < n_sink) & (j <= i))


def weights_with_sink(scores, sinks):
    sink_column = sinks[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.cat([scores, sink_column], dim=-1).softmax(dim=-1)[..., :-1]


def receptive_field(windows, seq_len):
    if None in windows:
        return seq_len
    return min(seq_len, sum(window - 1 for window in windows) + 1)


def test_sink_window_mask(capsys):
    check = exercises.check_sink_window_mask
    expect_success(check, sink_window_mask, capsys)
    sinks_in_future = lambda T, w, n: sink_window_mask(T, w, 0) | (torch.arange(T) < n)  # noqa: E731
    expect_message(check, sinks_in_future, "row 0 may attend to key 1, which is in its future")
    no_sinks = lambda T, w, n: sink_window_mask(T, w, 0)  # noqa: E731
    expect_message(check, no_sinks, "row 2 may not attend to key 0, one of the 1 sink keys")
    too_wide = lambda T, w, n: sink_window_mask(T, w + 1, n)  # noqa: E731
    expect_message(check, too_wide, "row 3 may attend to key 1, 2 steps back: outside its window")
    expect_message(check, lambda T, w, n: 0, "should return a boolean tensor, got int")


def test_sink_weights(capsys):
    check = exercises.check_sink_weights
    expect_success(check, weights_with_sink, capsys)
    expect_message(check, lambda s, k: s.softmax(-1), "every row sums to 1, so the sink took")
    kept = lambda s, k: torch.cat([s, k[:, None, None].expand(3, 4, 1)], -1).softmax(-1)  # noqa: E731
    expect_message(check, kept, "drop the sink's column after the softmax")
    doubled = lambda s, k: weights_with_sink(s, 2 * k)  # noqa: E731
    expect_message(check, doubled, "the weights differ from exp(score)")


def test_receptive_field(capsys):
    check = exercises.check_receptive_field
    expect_success(check, receptive_field, capsys)
    same_windows = lambda ws, T: min(T, len(ws) * (ws[0] - 1) + 1)  # noqa: E731
    expect_message(check, same_windows, "add each layer's own W - 1")
    whole_windows = lambda ws, T: min(T, sum(ws))  # noqa: E731
    expect_message(check, whole_windows, "each layer reaches window - 1")
    uncapped = lambda ws, T: sum(w - 1 for w in ws) + 1  # noqa: E731
    expect_message(check, uncapped, "no more than the 20 positions")
    no_global = lambda ws, T: receptive_field([w for w in ws if w is not None], T)  # noqa: E731
    expect_message(check, no_global, "a global layer lets the last position see every earlier")
    expect_message(check, lambda ws, T: float(T), "should return an int, got float")


SOLUTIONS.update(
    {
        "check_sink_window_mask": sink_window_mask,
        "check_sink_weights": weights_with_sink,
        "check_receptive_field": receptive_field,
    }
)

# Chapter 14


def find_circuit(model):
    block = torch.randint(0, 64, (32, 10), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([torch.full((32, 1), 64), block, block], dim=1)  # (B, 21): BOS, r, r
    weights = model.attention_weights(tokens)[..., 1:, 1:]  # (L, B, H, 20, 20)
    previous = previous_token_score(weights[0]).mean(dim=0).argmax().item()
    induction = induction_score(weights[1], 10).mean(dim=0).argmax().item()
    return previous, induction


def test_find_circuit(capsys):
    check = exercises.check_find_circuit
    expect_success(check, find_circuit, capsys)
    expect_message(check, lambda model: find_circuit(model)[::-1], "the order is (previous-token")

    def lowest_previous(model):
        block = torch.randint(0, 64, (32, 10), generator=torch.Generator().manual_seed(0))
        tokens = torch.cat([torch.full((32, 1), 64), block, block], dim=1)
        weights = model.attention_weights(tokens)[..., 1:, 1:]
        return previous_token_score(weights[0]).mean(0).argmin().item(), find_circuit(model)[1]

    expect_message(check, lowest_previous, "on the previous token, head")
    wrong_induction = lambda model: (find_circuit(model)[0], (find_circuit(model)[1] + 1) % 4)  # noqa: E731
    expect_message(check, wrong_induction, "has induction score")
    expect_message(check, lambda model: 3, "should return two head numbers")
    expect_message(check, lambda model: (0.0, 1.0), "should return two ints")


def test_permuting_heads_keeps_the_model_s_output():
    from attnbook.analysis.circuits import load_circuit_models, periodic_batch

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


def induction_share(weights, period):
    return weights.diagonal(offset=-(period - 1))[1:].mean().item()


def test_induction_share(capsys):
    check = exercises.check_induction_share
    expect_success(check, induction_share, capsys)
    duplicate = lambda weights, period: weights.diagonal(offset=-period).mean().item()  # noqa: E731
    expect_message(check, duplicate, "the earlier copy of the current token itself")
    padded = lambda w, period: w.diagonal(offset=-(period - 1))[1:].sum().item() / len(w)  # noqa: E731
    expect_message(check, padded, "average over the 5 queries t = period .. T - 1 only")
    with_early = lambda w, period: w.diagonal(offset=-(period - 1)).mean().item()  # noqa: E731
    expect_message(check, with_early, "queries t < period have no earlier copy")
    expect_message(check, lambda w, period: "0.5", "should return one number, got str")
    expect_message(check, lambda w, period: 0.5, "returned 0.5000, expected")


SOLUTIONS.update({"check_find_circuit": find_circuit, "check_induction_share": induction_share})

# Chapter 7: RoPE in the halves layout.


def rope_halves(x, positions, base=10000.0):
    dim = x.size(-1)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = (positions[:, None] * frequencies[None, :]).to(x.dtype)  # (T, dim / 2)
    first, second = x.chunk(2, dim=-1)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


SOLUTIONS["check_rope_halves"] = rope_halves


def test_rope_halves(capsys):
    check = exercises.check_rope_halves
    expect_success(check, rope_halves, capsys)
    expect_message(check, rope, "rotates adjacent pairs (2i, 2i + 1)")
    scaled = lambda x, positions: 2 * rope_halves(x, positions)  # noqa: E731
    expect_message(check, scaled, "changes the vectors' lengths")
    by_index = lambda x, positions: rope_halves(x, torch.arange(x.size(-2)))  # noqa: E731
    expect_message(check, by_index, "differs from the halves layout")


# Chapter 11: absorbed scores against cached latents.


def latent_scores(layer, x, latents):
    n_heads, head_dim = layer.n_heads, layer.head_dim
    w_uk = layer.k_up.weight.view(n_heads, head_dim, -1)  # (H, d_head, d_c)
    q = layer.q_proj(x).unflatten(-1, (n_heads, head_dim)).transpose(1, 2)  # (B, H, T, d_head)
    q_latent = q @ w_uk  # (B, H, T, d_c)
    return q_latent @ latents[:, None].transpose(-2, -1) / math.sqrt(head_dim)  # (B, H, T, S)


SOLUTIONS["check_latent_scores"] = latent_scores


def test_latent_scores(capsys):
    check = exercises.check_latent_scores
    expect_success(check, latent_scores, capsys)
    unscaled = lambda layer, x, c: latent_scores(layer, x, c) * math.sqrt(layer.head_dim)  # noqa: E731

    expect_message(check, unscaled, "forgot the scale")

    def explicit(layer, x, latents):  # builds the keys: not absorbed
        q = layer.q_proj(x).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
        k = layer.k_up(latents).unflatten(-1, (layer.n_heads, -1)).transpose(1, 2)
        return q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)

    expect_message(check, explicit, "must not call layer.k_up")
    transposed = lambda layer, x, c: latent_scores(layer, x, c).transpose(-2, -1)  # noqa: E731
    expect_message(check, transposed, "should return (B, H, T, S)")
    wrong_fold = lambda layer, x, c: latent_scores(layer, x, c).flip(1)  # noqa: E731
    expect_message(check, wrong_fold, "differs from q . k / sqrt(d_head)")


# Chapter 9: the backward pass of one block of queries.


def attention_backward(q, k, v, out, lse, d_out, scale):
    a = torch.exp(q @ k.T * scale - lse)  # (T, S): the weights, recomputed from the lse
    dv = a.T @ d_out  # (S, d_v)
    da = d_out @ v.T  # (T, S)
    dz = a * (da - (d_out * out).sum(dim=-1, keepdim=True))  # (T, S)
    return dz @ k * scale, dz.T @ q * scale, dv


SOLUTIONS["check_attention_backward"] = attention_backward


def test_attention_backward_checker(capsys):
    check = exercises.check_attention_backward
    expect_success(check, attention_backward, capsys)

    def no_row_dot(q, k, v, out, lse, d_out, scale):  # forgets the softmax's -delta term
        a = torch.exp(q @ k.T * scale - lse)
        dz = a * (d_out @ v.T)
        return dz @ k * scale, dz.T @ q * scale, a.T @ d_out

    expect_message(check, no_row_dot, "dZ = A * (dA - delta)")

    def no_scale(q, k, v, out, lse, d_out, scale):  # forgets the scale's chain rule
        dq, dk, dv = attention_backward(q, k, v, out, lse, d_out, scale)
        return dq / scale, dk / scale, dv

    expect_message(check, no_scale, "multiply dZ by the scale")

    def unnormalised(q, k, v, out, lse, d_out, scale):  # exp(scores) without the lse
        return attention_backward(q, k, v, out, torch.zeros_like(lse), d_out, scale)

    expect_message(check, unnormalised, "dv is wrong")


# Chapter 16: causal_tile_kind (its own tests in test_exercises_ch16.py).

from test_exercises_ch16 import causal_tile_kind  # noqa: E402

SOLUTIONS["check_causal_tile_kind"] = causal_tile_kind
