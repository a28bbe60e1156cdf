"""The KV cache, and attention modules that append to it and attend over every cached position."""

import pytest
import torch
from helpers import DEVICES, raises, seeded_randn

from attnbook import GroupedQueryAttention, KVCache, causal_mask, trace_shapes

D_MODEL, N_HEADS = 32, 8
HEAD_DIM = D_MODEL // N_HEADS


def layer(n_kv_heads, device="cpu"):
    torch.manual_seed(0)
    return GroupedQueryAttention(D_MODEL, N_HEADS, n_kv_heads).to(device).eval()


def test_empty_cache():
    cache = KVCache()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.keys is None
    assert "positions=0" in repr(cache)


def test_append_grows_along_positions_and_counts_bytes():
    cache = KVCache()
    first_k, first_v = seeded_randn(2, 3, 5, 4), seeded_randn(2, 3, 5, 4, seed=2)
    keys, values = cache.append(first_k, first_v)
    assert keys.shape == (2, 3, 5, 4) and len(cache) == 5
    new_k, new_v = seeded_randn(2, 3, 1, 4, seed=3), seeded_randn(2, 3, 1, 4, seed=4)
    keys, values = cache.append(new_k, new_v)
    assert keys.shape == values.shape == (2, 3, 6, 4) and len(cache) == 6
    assert torch.equal(keys[:, :, :5], first_k) and torch.equal(keys[:, :, 5:], new_k)
    assert torch.equal(values[:, :, 5:], new_v)
    assert cache.nbytes == 2 * 2 * 3 * 6 * 4 * 4  # K and V, B H_kv S d_head, float32


@pytest.mark.parametrize(
    ("new_keys", "message"),
    [
        (torch.zeros(2, 3, 1, 8), "with B, H_kv, d_head = 2, 3, 4 as in the cache"),
        (torch.zeros(1, 3, 1, 4), "with B, H_kv, d_head = 2, 3, 4 as in the cache"),
        (torch.zeros(2, 2, 1, 4), "with B, H_kv, d_head = 2, 3, 4 as in the cache"),
        (torch.zeros(2, 3, 1, 4, dtype=torch.float64), "does not match the cache's"),
        (torch.zeros(3, 1, 4), "(4 dims)"),
    ],
)
def test_bad_appends_raise_and_leave_the_cache_alone(new_keys, message):
    cache = KVCache()
    cache.append(torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 5, 4))
    with raises(message):
        cache.append(new_keys, new_keys)
    assert len(cache) == 5


def test_keys_and_values_must_match():
    with raises("values: expected the shape of keys (1, 1, 2, 4)"):
        KVCache().append(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 3, 4))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_kv_heads", [8, 2, 1])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("chunks", [(6, 1, 1, 1), (4, 3, 2), (1, 1, 1, 1, 1)])
def test_chunked_causal_attention_with_a_cache_equals_the_full_forward(
    device, n_kv_heads, need_weights, chunks
):
    attention = layer(n_kv_heads, device)
    x = seeded_randn(2, sum(chunks), D_MODEL, device=device)  # (B, T, D)
    with torch.no_grad():
        full, _ = attention(x, is_causal=True)  # (B, T, D)
        cache, pieces, start = KVCache(), [], 0
        for length in chunks:
            piece, _ = attention(
                x[:, start : start + length],
                is_causal=True,
                cache=cache,
                need_weights=need_weights,
            )  # (B, length, D)
            pieces.append(piece)
            start += length
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
    assert len(cache) == sum(chunks)
    assert cache.keys.shape == (2, n_kv_heads, sum(chunks), HEAD_DIM)


def test_weights_with_a_cache_use_the_bottom_right_mask():
    attention = layer(2)
    x = seeded_randn(1, 7, D_MODEL)  # (B, T, D)
    cache = KVCache()
    with torch.no_grad():
        attention(x[:, :4], is_causal=True, cache=cache)
        _, weights = attention(x[:, 4:], is_causal=True, cache=cache, need_weights=True)
    assert weights.shape == (1, N_HEADS, 3, 7)
    allowed = causal_mask(3, 7, align="bottom-right")  # (T, S)
    assert torch.all(weights[..., ~allowed] == 0) and torch.all(weights[..., allowed] > 0)


def test_the_top_left_mask_on_a_chunk_is_wrong():
    attention = layer(8)
    x = seeded_randn(1, 7, D_MODEL)  # (B, T, D)
    with torch.no_grad():
        full, _ = attention(x, is_causal=True)  # (B, T, D)
        cache = KVCache()
        attention(x[:, :4], is_causal=True, cache=cache)
        top_left = causal_mask(3, 7)  # (T, S): the last keys hidden from every query
        chunk, _ = attention(x[:, 4:], mask=top_left, cache=cache)  # (B, 3, D)
    assert not torch.allclose(chunk, full[:, 4:], atol=1e-3)


def test_an_explicit_mask_with_a_cache_covers_cached_positions():
    attention = layer(4)
    x = seeded_randn(1, 5, D_MODEL)
    cache = KVCache()
    with torch.no_grad():
        attention(x[:, :3], is_causal=True, cache=cache)
        with raises("does not broadcast to the scores' shape (1, 8, 2, 5)"):
            attention(x[:, 3:], mask=torch.ones(2, 2, dtype=torch.bool), cache=cache)
        assert len(cache) == 3
        chunk, _ = attention(x[:, 3:], mask=causal_mask(2, 5, align="bottom-right"), cache=cache)
        full, _ = attention(x, is_causal=True)
    torch.testing.assert_close(chunk, full[:, 3:])


def test_cache_must_be_a_kv_cache():
    with raises("cache: expected an attnbook.KVCache or None"):
        layer(8)(seeded_randn(1, 2, D_MODEL), cache=[])


def test_trace_shows_the_cache_growing():
    attention = layer(2)
    cache = KVCache()
    x = seeded_randn(1, 5, D_MODEL)
    with torch.no_grad():
        attention(x[:, :4], is_causal=True, cache=cache)
        with trace_shapes() as trace:
            attention(x[:, 4:], is_causal=True, cache=cache)
    assert trace.steps == ["q", "k", "v", "k cache", "v cache", "attended", "merged", "output"]
    assert trace["k"] == (1, 2, 1, HEAD_DIM)
    assert trace["k cache"] == trace["v cache"] == (1, 2, 5, HEAD_DIM)
    dims = {row.step: row.dims for row in trace.rows}
    # the new positions are labelled T, only the cache S
    assert dims["k"] == dims["v"] == "(B, H_kv, T, d_head)"
    assert dims["k cache"] == dims["v cache"] == "(B, H_kv, S, d_head)"


def test_without_a_cache_the_trace_is_unchanged():
    with trace_shapes() as trace:
        layer(2)(seeded_randn(1, 3, D_MODEL), need_weights=True)
    assert "k cache" not in trace.steps
    assert {row.step: row.dims for row in trace.rows}["k"] == "(B, H_kv, S, d_head)"
    assert trace.steps[:5] == ["q", "k", "v", "k repeated", "v repeated"]
