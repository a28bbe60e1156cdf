"""scaled_dot_product_attention against PyTorch's and against a float64 reference."""

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    DEVICES,
    DTYPES,
    TOLERANCES,
    as_float64,
    random_qkv,
    reference_attention,
)
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attnbook import causal_mask, masked_softmax, scaled_dot_product_attention


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_float64_reference(device, dtype):
    q, k, v = random_qkv(2, 3, 5, 7, 16, dtype=dtype, device=device)
    output, weights = scaled_dot_product_attention(q, k, v)
    expected_output, expected_weights = reference_attention(q, k, v)
    assert output.dtype == dtype
    torch.testing.assert_close(as_float64(output), expected_output, **TOLERANCES[dtype])
    torch.testing.assert_close(as_float64(weights), expected_weights, **TOLERANCES[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_matches_torch_with_masks(device, mask_kind):
    q, k, v = random_qkv(2, 3, 5, 7, 8, device=device, value_dim=4)
    generator = torch.Generator().manual_seed(1)
    keep = torch.rand(2, 1, 5, 7, generator=generator).to(device) > 0.3
    keep[..., 0] = True  # every row keeps a key: PyTorch and we agree on partial rows
    mask = keep if mask_kind == "bool" else torch.randn(5, 7, generator=generator).to(device)
    output, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("device", DEVICES)
def test_scale_matches_torch(device):
    q, k, v = random_qkv(1, 2, 4, 6, 8, device=device)
    output, _ = scaled_dot_product_attention(q, k, v, scale=0.5)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, scale=0.5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("query_len,key_len", [(5, 5), (3, 7)])
def test_is_causal_is_top_left_like_torch(device, query_len, key_len):
    q, k, v = random_qkv(2, 2, query_len, key_len, 8, device=device)
    output, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(output, expected)
    top_left = causal_upper_left(query_len, key_len)._materialize(device)
    assert torch.equal(weights > 0, top_left.expand_as(weights))


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")  # T > S
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("query_len,key_len", [(1, 6), (3, 7), (4, 4), (6, 3)])
def test_causal_mask_alignments_match_torch_bias(device, query_len, key_len):
    upper_left = causal_upper_left(query_len, key_len)._materialize(device)
    lower_right = causal_lower_right(query_len, key_len)._materialize(device)
    assert torch.equal(causal_mask(query_len, key_len, device=device), upper_left)
    assert torch.equal(
        causal_mask(query_len, key_len, align="bottom-right", device=device), lower_right
    )


@pytest.mark.parametrize("device", DEVICES)
def test_bottom_right_mask_matches_torch_causal_bias(device):
    q, k, v = random_qkv(1, 2, 3, 7, 8, device=device)
    mask = causal_mask(3, 7, align="bottom-right", device=device)
    output, _ = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 7))
    torch.testing.assert_close(output, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_fully_masked_rows_are_zero_without_nan(device, mask_kind):
    q, k, v = random_qkv(2, 2, 4, 5, 8, device=device)
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    keep = torch.ones(4, 5, dtype=torch.bool, device=device)
    keep[1] = False  # query 1 may attend to nothing
    mask = (
        keep
        if mask_kind == "bool"
        else torch.zeros(4, 5, device=device).masked_fill(~keep, float("-inf"))
    )
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights[..., 1, :], torch.zeros_like(weights[..., 1, :]))
    assert torch.equal(output[..., 1, :], torch.zeros_like(output[..., 1, :]))
    (output.square().sum() + weights.sum()).backward()
    for tensor in (q, k, v):
        assert torch.isfinite(tensor.grad).all()
    assert torch.equal(q.grad[..., 1, :], torch.zeros_like(q.grad[..., 1, :]))
    expected, _ = reference_attention(q.detach(), k.detach(), v.detach(), mask)
    torch.testing.assert_close(as_float64(output), expected, **TOLERANCES[torch.float32])


def test_naive_softmax_would_give_nan_on_fully_masked_row():
    """The failure masked_softmax exists to prevent: this test fails if torch ever changes."""
    scores = torch.zeros(1, 3).masked_fill(torch.ones(1, 3, dtype=torch.bool), float("-inf"))
    assert torch.isnan(torch.softmax(scores, dim=-1)).all()
    assert torch.equal(masked_softmax(scores), torch.zeros(1, 3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_huge_logits_stay_finite(device, dtype):
    q, k, v = random_qkv(1, 1, 4, 6, 8, dtype=dtype, device=device)
    q = q * 200  # fp16 q.k would overflow 65504 without float32 scoring
    k = k * 200
    output, weights = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(output).all()
    expected_output, expected_weights = reference_attention(q, k, v)
    torch.testing.assert_close(as_float64(weights), expected_weights, **TOLERANCES[dtype])
    torch.testing.assert_close(as_float64(output), expected_output, **TOLERANCES[dtype])


def test_gradcheck_float64():
    q, k, v = (t.double().requires_grad_(True) for t in random_qkv(1, 2, 3, 4, 5))
    mask = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0], (q, k, v)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_torch(device):
    inputs = [t.requires_grad_(True) for t in random_qkv(2, 2, 5, 5, 8, device=device)]
    ours, _ = scaled_dot_product_attention(*inputs, is_causal=True)
    ours_grads = torch.autograd.grad(ours.sum(), inputs)
    theirs = F.scaled_dot_product_attention(*inputs, is_causal=True)
    theirs_grads = torch.autograd.grad(theirs.sum(), inputs)
    for mine, expected in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(mine, expected)


def test_dropout_zeroes_and_rescales_weights():
    torch.manual_seed(0)
    q, k, v = random_qkv(4, 4, 16, 16, 8)
    _, clean = scaled_dot_product_attention(q, k, v)
    _, dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.25)
    kept = dropped != 0
    assert 0.7 < kept.float().mean() < 0.8
    torch.testing.assert_close(dropped[kept], clean[kept] / 0.75)


def test_works_without_batch_dims():
    q, k, v = (t[0, 0] for t in random_qkv(1, 1, 3, 4, 8))
    output, weights = scaled_dot_product_attention(q, k, v)
    assert output.shape == (3, 8) and weights.shape == (3, 4)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v))
