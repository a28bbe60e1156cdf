"""Every bad input raises ValueError naming the argument, what it got and what it expected."""

import pytest
import torch
from helpers import raises

from attnbook import (
    AdditiveAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    plot_attention,
    plot_heads,
    scaled_dot_product_attention,
)

q = torch.randn(2, 3, 4, 8)  # (B, H, T, d)
k = torch.randn(2, 3, 5, 8)  # (B, H, S, d)
v = torch.randn(2, 3, 5, 6)  # (B, H, S, d_v)
x = torch.randn(2, 4, 16)  # (B, T, D)


def test_query_rank_too_small():
    with raises("query: expected shape (..., T, d) with at least 2 dims, got query.shape = (8,)"):
        scaled_dot_product_attention(torch.randn(8), k, v)


def test_batch_dims_that_do_not_broadcast():
    with raises(
        "value: the batch dims (all but the last two) must broadcast together, as in PyTorch "
        "(each 1 or equal); got query.shape = (2, 3, 4, 8), key.shape = (2, 2, 5, 8)"
    ):
        scaled_dot_product_attention(q, k[:, :2], v)


def test_head_width_differs():
    with raises(
        "key: expected shape (..., S, d) with d = 8 as in query, got key.shape = (2, 3, 5, 4)"
    ):
        scaled_dot_product_attention(q, k[..., :4], v)


def test_key_value_length_mismatch():
    with raises(
        "value: expected shape (..., S, d_v) with S = 5 as in key, got value.shape = (2, 3, 4, 6)"
    ):
        scaled_dot_product_attention(q, k, v[..., :4, :])


def test_dtype_mismatch():
    with raises("value: dtype torch.float64 does not match query's torch.float32"):
        scaled_dot_product_attention(q, k, v.double())


def test_mask_wrong_shape():
    with raises(
        "mask: shape (4, 4) does not broadcast to the scores' shape (2, 3, 4, 5) = (..., T, S)"
    ):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 4, dtype=torch.bool))


def test_mask_wrong_dtype():
    with raises("mask: expected dtype torch.bool (True = attend) or a floating dtype"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 5, dtype=torch.int64))


def test_mask_with_is_causal():
    with raises("mask: got both a mask and is_causal=True"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool), is_causal=True)


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_dropout_p_out_of_range(p):
    with raises(f"dropout_p: expected a probability in [0, 1), got {p}"):
        scaled_dot_product_attention(q, k, v, dropout_p=p)


def test_module_dropout_out_of_range():
    with raises("dropout: expected a probability in [0, 1), got 1.5"):
        MultiHeadAttention(16, 4, dropout=1.5)


def test_d_model_not_divisible_by_n_heads():
    with raises("d_model: 10 is not divisible by n_heads = 3"):
        MultiHeadAttention(10, 3)


def test_n_heads_not_divisible_by_n_kv_heads():
    with raises("n_kv_heads: n_heads = 8 is not divisible by n_kv_heads = 3"):
        GroupedQueryAttention(16, 8, 3)


def test_n_heads_not_positive():
    with raises("n_heads: expected a positive int, got 0"):
        MultiHeadAttention(16, 0)


def test_module_query_wrong_rank():
    with raises("query: expected shape (B, T, D) (3 dims), got query.shape = (4, 16)"):
        MultiHeadAttention(16, 4)(x[0])


def test_module_query_wrong_width():
    with raises(
        "query: expected shape (B, T, D) with D = d_model = 16, got query.shape = (2, 4, 12)"
    ):
        MultiHeadAttention(16, 4)(x[..., :12])


def test_module_batch_mismatch():
    with raises("key: batch size 1 must equal query's 2"):
        MultiHeadAttention(16, 4)(x, x[:1])


def test_module_key_value_length_mismatch():
    with raises(
        "value: expected shape (B, S, D) with S = 4 as in key, got value.shape = (2, 3, 16)"
    ):
        MultiHeadAttention(16, 4)(x, x, x[:, :3])


def test_module_value_without_key():
    with raises("key: got value but no key"):
        MultiHeadAttention(16, 4)(x, value=x)


def test_module_mask_wrong_shape():
    with raises(
        "mask: shape (2, 4) does not broadcast to the scores' shape (2, 4, 4, 4) = (B, H, T, S)"
    ):
        MultiHeadAttention(16, 4)(x, mask=torch.ones(2, 4, dtype=torch.bool))


def test_module_mask_with_is_causal():
    with raises("mask: got both a mask and is_causal=True"):
        MultiHeadAttention(16, 4)(x, mask=causal_mask(4), is_causal=True)


def test_additive_key_wrong_width():
    with raises("key: expected last dim 8, got key.shape = (2, 5, 6)"):
        AdditiveAttention(16, 8, 10)(x, v[:, 0], v[:, 0])


def test_additive_value_length_mismatch():
    with raises("value: expected shape (..., S, d_v) with S = 5 as in key, got value.shape"):
        AdditiveAttention(16, 8, 10)(x, k[:, 0], v[:, 0, :3])


def test_causal_mask_bad_alignment():
    with raises("align: expected one of ('top-left', 'bottom-right'), got 'left'"):
        causal_mask(3, align="left")


def test_causal_mask_bad_length():
    with raises("query_len: expected a positive int, got 0"):
        causal_mask(0)


def test_padding_mask_length_too_long():
    with raises("lengths: expected every length in [0, max_len = 4], got [2, 5]"):
        padding_mask([2, 5], 4)


def test_padding_mask_lengths_wrong_rank():
    with raises("lengths: expected a 1-D sequence of ints (B,), got shape (2, 1)"):
        padding_mask([[2], [3]], 4)


def test_plot_attention_wrong_rank():
    with raises("weights: expected shape (T, S), got shape (2, 3, 4)"):
        plot_attention(torch.rand(2, 3, 4))


def test_plot_labels_wrong_count():
    with raises("key_labels: expected 4 labels (one per key column), got 3"):
        plot_attention(torch.rand(3, 4), key_labels=["a", "b", "c"])


def test_plot_heads_wrong_rank():
    with raises(
        "weights: expected shape (H, T, S); index a batch item first, got shape (1, 2, 3, 4)"
    ):
        plot_heads(torch.rand(1, 2, 3, 4))
