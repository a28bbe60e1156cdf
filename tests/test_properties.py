"""Properties that must hold for every shape, searched with hypothesis."""

import torch
from helpers import TOLERANCES, as_float64, grouped_attention_reference, seeded_tensors
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import GroupedQueryAttention, MultiHeadAttention, scaled_dot_product_attention

sizes = st.integers(min_value=1, max_value=6)
seeds = st.integers(min_value=0, max_value=2**16)


@settings(max_examples=40, deadline=None)
@given(batch=sizes, query_len=sizes, key_len=sizes, head_dim=sizes, seed=seeds)
def test_rows_sum_to_one_or_zero_when_fully_masked(batch, query_len, key_len, head_dim, seed):
    q, k, v = seeded_tensors(
        (batch, query_len, head_dim),
        (batch, key_len, head_dim),
        (batch, key_len, head_dim),
        seed=seed,
    )
    keep = (
        torch.rand(batch, query_len, key_len, generator=torch.Generator().manual_seed(seed)) > 0.5
    )
    _, weights = scaled_dot_product_attention(q, k, v, keep)
    expected = keep.any(dim=-1).float()  # 1 where the row can attend somewhere, else 0
    torch.testing.assert_close(weights.sum(dim=-1), expected)
    assert torch.equal(weights > 0, keep & (weights > 0))  # blocked keys get exactly zero


@settings(max_examples=30, deadline=None)
@given(
    length=st.integers(min_value=2, max_value=8),
    cut=st.integers(min_value=1, max_value=7),
    seed=seeds,
)
def test_causal_outputs_ignore_later_tokens(length, cut, seed):
    cut = min(cut, length - 1)
    torch.manual_seed(seed)
    module = MultiHeadAttention(8, 2).eval()
    (x,) = seeded_tensors((2, length, 8), seed=seed)
    changed = x.clone()
    changed[:, cut:] = torch.randn_like(changed[:, cut:])
    for need_weights in (True, False):
        before, _ = module(x, is_causal=True, need_weights=need_weights)
        after, _ = module(changed, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(before[:, :cut], after[:, :cut])


@settings(max_examples=30, deadline=None)
@given(query_len=sizes, key_len=sizes, head_dim=sizes, seed=seeds)
def test_permuting_keys_with_their_values_changes_nothing(query_len, key_len, head_dim, seed):
    q, k, v = seeded_tensors(
        (query_len, head_dim), (key_len, head_dim), (key_len, head_dim), seed=seed
    )
    order = torch.randperm(key_len, generator=torch.Generator().manual_seed(seed))
    output, weights = scaled_dot_product_attention(q, k, v)
    permuted_output, permuted_weights = scaled_dot_product_attention(q, k[order], v[order])
    torch.testing.assert_close(permuted_output, output)
    torch.testing.assert_close(permuted_weights, weights[:, order])


@settings(max_examples=20, deadline=None)
@given(
    heads=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (8, 2)]),
    length=sizes,
    seed=seeds,
)
def test_every_head_grouping_matches_float64_sdpa_with_enable_gqa(heads, length, seed):
    n_heads, n_kv_heads = heads
    torch.manual_seed(seed)
    module = GroupedQueryAttention(8, n_heads, n_kv_heads).eval()
    (x,) = seeded_tensors((2, length, 8), seed=seed)
    expected = grouped_attention_reference(module, x, is_causal=True)  # (B, T, D) float64
    for need_weights in (True, False):
        output, _ = module(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(as_float64(output), expected, **TOLERANCES[torch.float32])
