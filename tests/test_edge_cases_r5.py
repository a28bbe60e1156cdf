"""Edge cases found by adversarial inputs (issue 30, section 3), one test or group each.

Each test failed before its fix: a gradient penalty silently lost, keys and values without
gradients, a huge window wrapped round to an empty mask, NaN from entries never read, or an
error that does not name the argument.
"""

import re

import matplotlib
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from helpers import raises, seeded_tensors
from matplotlib import pyplot as plt

from attnbook import GroupedQueryAttention, RollingKVCache, sliding_window_mask
from attnbook.analysis.circuits import induction_score
from attnbook.book import diagrams
from attnbook.core.masks import causal_mask
from attnbook.efficient.launcher import launch
from attnbook.efficient.ring import all_gather_attention, ring_attention
from attnbook.efficient.sharding import shard_sequence
from attnbook.efficient.tiled import tiled_attention
from attnbook.layers.sinks import add_sinks_from_lse, attention_with_sinks, streaming_mask

HUGE_WINDOWS = [2**63 - 1, 2**63, 2**64 - 1, 10**30]

# 1. Double backward through the custom autograd functions: a clear error, every time.


def test_tiled_attention_refuses_a_graph_of_its_gradients():
    q, k, v = (t.requires_grad_() for t in seeded_tensors(*[(1, 2, 8, 4)] * 3))
    output = tiled_attention(q, k, v, is_causal=True, block_q=4, block_k=4)
    with pytest.raises(RuntimeError, match="create_graph=True"):
        torch.autograd.grad(output.sum(), q, create_graph=True)
    # first-order gradients are unchanged
    output = tiled_attention(q, k, v, is_causal=True, block_q=4, block_k=4)
    (dq,) = torch.autograd.grad(output.sum(), q)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(dq, torch.autograd.grad(reference.sum(), q)[0])


def gradients_across_ranks(query, key, value, grad_output):
    """On each rank: all-gather attention's gradients of this rank's shards, and the error
    that ring attention raises when asked for a graph of its gradients."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    names = ("query", "key", "value", "grad")
    shards = [
        shard_sequence(t, rank, world_size, "zigzag", name)
        for t, name in zip((query, key, value, grad_output), names, strict=True)
    ]  # (B, H, T/P, d), (B, H, S/P, d), (B, H, S/P, d_v), (B, H, T/P, d_v)
    leaves = [t.clone().requires_grad_() for t in shards[:3]]
    output = all_gather_attention(*leaves, is_causal=True, layout="zigzag")
    grads = torch.autograd.grad(output, leaves, shards[3])
    output = ring_attention(*leaves, is_causal=True, layout="zigzag")
    try:
        torch.autograd.grad(output, leaves, shards[3], create_graph=True)
        message = None
    except RuntimeError as error:
        message = str(error)
    return grads, message


def test_all_gather_gives_keys_and_values_their_gradients_and_ring_refuses_a_graph():
    tensors = seeded_tensors((1, 2, 8, 4), (1, 2, 8, 4), (1, 2, 8, 3), (1, 2, 8, 3))
    query, key, value, grad_output = (t.double() for t in tensors)
    results = launch(gradients_across_ranks, 2, query, key, value, grad_output)
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]
    output = F.scaled_dot_product_attention(*leaves, is_causal=True)
    expected = torch.autograd.grad(output, leaves, grad_output)
    for rank, (grads, message) in enumerate(results):
        for name, ours, full in zip("qkv", grads, expected, strict=True):
            assert ours is not None, f"rank {rank}: d{name} is None"
            theirs = shard_sequence(full, rank, 2, "zigzag")
            torch.testing.assert_close(ours, theirs, msg=lambda m, n=name: f"d{n}: {m}")
        assert message is not None and "create_graph=True" in message


# 3. A window larger than the sequence is the causal mask; nothing wraps round.


@pytest.mark.parametrize("window", HUGE_WINDOWS)
def test_a_huge_window_is_the_causal_mask(window):
    expected = causal_mask(4, 6, align="bottom-right")
    assert torch.equal(sliding_window_mask(4, window, 6), expected)
    with_sink = streaming_mask(4, window, 1, 6)
    assert torch.equal(with_sink, expected)


@pytest.mark.parametrize("window", HUGE_WINDOWS)
def test_a_huge_window_layer_is_a_causal_layer(window):
    torch.manual_seed(0)
    windowed = GroupedQueryAttention(8, 2, 1, window=window).eval()
    causal = GroupedQueryAttention(8, 2, 1).eval()
    causal.load_state_dict(windowed.state_dict())
    x = torch.randn(2, 5, 8)  # (B, T, D)
    with torch.no_grad():
        torch.testing.assert_close(windowed(x, is_causal=True)[0], causal(x, is_causal=True)[0])
        cache = windowed.new_cache()
        steps = [windowed(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), causal(x, is_causal=True)[0])
    assert cache.n_cached == 5


def test_a_rolling_cache_with_a_huge_window_keeps_everything_without_a_warning(recwarn):
    cache = RollingKVCache(2**64 - 1)
    keys = torch.randn(1, 1, 3, 2)  # (B, H_kv, T, d_head)
    cache.append(keys, keys)
    assert cache.n_cached == 3 and not recwarn.list


# 4. A fully masked row with a sink of -inf: 0, as attention_with_sinks gives.


def test_add_sinks_from_lse_on_a_fully_masked_row_equals_attention_with_sinks():
    q, k, v = (t.double() for t in seeded_tensors((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)))
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 sees no key
    sinks = torch.tensor([float("-inf"), 0.5], dtype=torch.float64, requires_grad=True)
    expected, _ = attention_with_sinks(q, k, v, sinks, mask=mask)
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~mask, float("-inf"))  # (B, H, T, S)
    lse = torch.logsumexp(scores, dim=-1).requires_grad_()  # (B, H, T)
    output = torch.nan_to_num(scores.softmax(dim=-1)) @ v  # (B, H, T, d_v)
    ours = add_sinks_from_lse(output, lse, sinks)
    torch.testing.assert_close(ours, expected)
    ours.sum().backward()
    assert torch.isfinite(sinks.grad).all() and torch.isfinite(lse.grad).all()


# 5. and 6. RollingKVCache: its docstring's mask, and a larger cache than the window.


def test_the_rolling_cache_docstring_builds_the_mask_the_layer_uses():
    call = re.search(r"``(sliding_window_mask\([^`]*\))``", RollingKVCache.__doc__)
    assert call is not None, "the docstring no longer names the mask to attend with"
    T, n_cached, window = 2, 3, 3
    built = eval(call.group(1), {"sliding_window_mask": sliding_window_mask}, locals())
    # the T new queries are the last T of the n_cached + T keys; each sees its last 3
    expected = torch.tensor([[False, True, True, True, False], [False, False, True, True, True]])
    assert torch.equal(built, expected)


def test_a_window_layer_accepts_a_rolling_cache_that_holds_more_than_its_window():
    torch.manual_seed(0)
    layer = GroupedQueryAttention(8, 2, 1, window=3).eval()
    x = torch.randn(1, 7, 8)  # (B, T, D)
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)
        for cache in (layer.new_cache(), RollingKVCache(5)):
            steps = [layer(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(7)]
            torch.testing.assert_close(torch.cat(steps, dim=1), full)
    with raises("cache: a RollingKVCache of window 2 holds too few positions"):
        layer(x, is_causal=True, cache=RollingKVCache(2))


# 7. and 8. induction_score: entries it never reads, and a period beyond int64.


def test_induction_score_ignores_entries_it_never_reads():
    weights = torch.full((2, 6, 6), 0.1)  # (H, T, S)
    expected = induction_score(weights, 3)
    weights[:, 1, 0] = float("nan")  # query 1 < period: never read
    weights[:, 2, 0] = float("inf")
    torch.testing.assert_close(induction_score(weights, 3), expected)


@pytest.mark.parametrize("period", [2**63, 2**64 + 3, -(2**70)])
def test_induction_score_names_a_period_beyond_int64(period):
    with raises("period: expected an int or an integer tensor"):
        induction_score(torch.full((6, 6), 0.1), period)


# 10. Every diagram checks its arguments before drawing, and leaves no figure open when it
# refuses.

BAD_DIAGRAM_CALLS = [
    (diagrams.self_attention_dataflow, {"T": 0}, "T"),
    (diagrams.self_attention_dataflow, {"D": -3}, "D"),
    (diagrams.self_attention_dataflow, {"d_head": 2.5}, "d_head"),
    (diagrams.self_attention_dataflow, {"T": "6"}, "T"),
    (diagrams.mla_data_flow, {"latent_dim": 0}, "latent_dim"),
    (diagrams.mla_data_flow, {"rope_dim": -1}, "rope_dim"),
    (diagrams.mla_data_flow, {"head_dim": "128"}, "head_dim"),
    (diagrams.mla_absorbed_flow, {"n_heads": 0}, "n_heads"),
    (diagrams.tiny_gpt_variants, {"n_layers": -1}, "n_layers"),
    (diagrams.tiny_gpt_variants, {"latent_dim": "32"}, "latent_dim"),
    (diagrams.tiny_gpt_variants, {"head_dim": 0}, "head_dim"),
    (diagrams.mla_absorbed_flow, {"latent_dim": 2.5}, "latent_dim"),
    (diagrams.tiling_grid, {"n_query_blocks": 0}, "n_query_blocks"),
    (diagrams.tiling_grid, {"n_key_blocks": 1.5}, "n_key_blocks"),
    (diagrams.tiling_grid, {"current": (5, 0)}, "current"),
    (diagrams.tiling_grid, {"current": (1, 2)}, "current"),
    (diagrams.tiling_grid, {"current": "now"}, "current"),
    (diagrams.rope_rotation, {"theta": "25"}, "theta"),
    (diagrams.rope_rotation, {"theta": float("nan")}, "theta"),
    (diagrams.rope_rotation, {"shift": -4}, "shift"),
    (diagrams.rope_rotation, {"shift": 1.5}, "shift"),
    (diagrams.seq2seq_decoders, {"n_inputs": 0}, "n_inputs"),
    (diagrams.seq2seq_decoders, {"n_steps": -2}, "n_steps"),
    (diagrams.seq2seq_decoders, {"n_steps": 2.0}, "n_steps"),
    (diagrams.ring_steps, {"world_size": 2.5}, "world_size"),
    (diagrams.ring_steps, {"world_size": "4"}, "world_size"),
    (diagrams.head_split, {"n_heads": 0}, "n_heads"),
]


@pytest.mark.parametrize(
    "draw, arguments, name",
    BAD_DIAGRAM_CALLS,
    ids=[f"{d.__name__}-{a}" for d, a, _ in BAD_DIAGRAM_CALLS],
)
def test_diagrams_refuse_bad_arguments_and_leave_no_figure_open(draw, arguments, name):
    matplotlib.use("Agg")
    plt.close("all")
    with raises(f"{name}: expected") as refused:
        draw(**arguments)
    assert repr(next(iter(arguments.values()))) in str(refused.value)
    assert plt.get_fignums() == [], f"{draw.__name__}({arguments}) left a figure open"
