"""Score functions against PyTorch (SDPA, nn.Bilinear) and float64 loops over the pairs."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, TOLERANCES, as_float64, random_qkv

from attnbook import (
    AdditiveScore,
    DotScore,
    GeneralScore,
    ScaledDotScore,
    set_seed,
    trace_shapes,
)


def pairs_loop(score_of_pair, query, key):
    """(T, d_q), (S, d_k) -> (T, S) float64, one pair at a time as the formulas are written."""
    scores = torch.empty(query.size(0), key.size(0), dtype=torch.float64)
    for t in range(query.size(0)):
        for s in range(key.size(0)):
            scores[t, s] = score_of_pair(query[t].double(), key[s].double())
    return scores


@pytest.mark.parametrize("device", DEVICES)
def test_dot_and_scaled_dot_match_sdpa(device):
    q, k, v = random_qkv(2, 3, 5, 7, 16, device=device)
    dot_output = DotScore()(q, k).softmax(dim=-1) @ v
    torch.testing.assert_close(dot_output, F.scaled_dot_product_attention(q, k, v, scale=1.0))
    scaled_output = ScaledDotScore()(q, k).softmax(dim=-1) @ v
    torch.testing.assert_close(scaled_output, F.scaled_dot_product_attention(q, k, v))
    half_output = ScaledDotScore(scale=0.5)(q, k).softmax(dim=-1) @ v
    torch.testing.assert_close(half_output, F.scaled_dot_product_attention(q, k, v, scale=0.5))


def test_scaled_dot_divides_by_sqrt_width():
    q, k, _ = random_qkv(1, 1, 4, 6, 64)
    torch.testing.assert_close(ScaledDotScore()(q, k), q @ k.transpose(-2, -1) / 8.0)


@pytest.mark.parametrize("device", DEVICES)
def test_general_matches_torch_bilinear(device):
    set_seed(0)
    score = GeneralScore(6, 4).to(device)
    query = torch.randn(2, 3, 6, device=device)
    key = torch.randn(2, 5, 4, device=device)
    bilinear = torch.nn.Bilinear(6, 4, 1, bias=False).to(device)
    bilinear.weight.data.copy_(score.W.detach()[None])  # (1, d_q, d_k)
    pairs_q = query[:, :, None, :].expand(2, 3, 5, 6)  # (B, T, S, d_q)
    pairs_k = key[:, None, :, :].expand(2, 3, 5, 4)  # (B, T, S, d_k)
    expected = bilinear(pairs_q, pairs_k).squeeze(-1)  # (B, T, S)
    torch.testing.assert_close(score(query, key), expected)


def test_general_with_identity_is_dot():
    q, k, _ = random_qkv(2, 1, 3, 4, 5)
    score = GeneralScore(5, 5)
    score.W.data.copy_(torch.eye(5))
    torch.testing.assert_close(score(q, k), q @ k.transpose(-2, -1))


def test_general_matches_float64_loop():
    set_seed(0)
    score = GeneralScore(3, 5)
    query, key = torch.randn(4, 3), torch.randn(6, 5)
    weight = score.W.detach().double()
    expected = pairs_loop(lambda q, k: q @ weight @ k, query, key)
    torch.testing.assert_close(as_float64(score(query, key)), expected, **TOLERANCES[torch.float32])


@pytest.mark.parametrize("device", DEVICES)
def test_additive_matches_float64_loop(device):
    set_seed(0)
    score = AdditiveScore(3, 4, 5)
    query, key = torch.randn(2, 2, 3), torch.randn(2, 6, 4)  # (B, T, d_q), (B, S, d_k)
    w_q, w_k, v = (as_float64(p) for p in (score.W_q.weight, score.W_k.weight, score.v.weight))
    expected = torch.stack(
        [
            pairs_loop(lambda q, k: v[0] @ torch.tanh(w_q @ q + w_k @ k), query[b], key[b])
            for b in range(2)
        ]
    )  # (B, T, S)
    scores = score.to(device)(query.to(device), key.to(device))
    torch.testing.assert_close(as_float64(scores), expected, **TOLERANCES[torch.float32])


def test_parameter_counts():
    counts = {
        name: sum(p.numel() for p in module.parameters())
        for name, module in {
            "dot": DotScore(),
            "scaled": ScaledDotScore(),
            "general": GeneralScore(8, 6),
            "additive": AdditiveScore(8, 6, 10),
        }.items()
    }
    assert counts == {"dot": 0, "scaled": 0, "general": 48, "additive": 8 * 10 + 6 * 10 + 10}


def test_gradcheck_float64():
    set_seed(0)
    general = GeneralScore(3, 4).double()
    additive = AdditiveScore(3, 4, 5).double()
    query = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True)
    key = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(general, (query, key))
    assert torch.autograd.gradcheck(additive, (query, key))
    same_width_key = torch.randn(1, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ScaledDotScore(), (query, same_width_key))


def test_trace_names_every_step():
    query, key = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with trace_shapes() as trace:
        DotScore()(query, key)
        ScaledDotScore()(query, key)
        GeneralScore(8, 8)(query, key)
        AdditiveScore(8, 8, 4)(query, key)
    assert trace.steps == [
        "dot scores",
        "scaled dot scores",
        "W k",
        "general scores",
        "W_q q",
        "W_k k",
        "features",
        "additive scores",
    ]
    assert trace["features"] == (2, 3, 5, 4)
    assert trace["additive scores"] == (2, 3, 5)


def test_works_without_batch_dims_and_with_many():
    query, key = torch.randn(3, 8), torch.randn(5, 8)
    assert ScaledDotScore()(query, key).shape == (3, 5)
    assert AdditiveScore(8, 8, 4)(query, key).shape == (3, 5)
    many_query, many_key = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 5, 8)
    assert GeneralScore(8, 8)(many_query, many_key).shape == (2, 4, 3, 5)
    expected = many_query @ many_key.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(ScaledDotScore()(many_query, many_key), expected)


@pytest.mark.parametrize(
    "module,query_shape,key_shape,message",
    [
        (DotScore(), (2, 3, 8), (2, 5, 6), "dot product needs d_k = d_q = 8"),
        (ScaledDotScore(), (8,), (5, 8), "at least 2 dims"),
        (ScaledDotScore(), (2, 3, 8), (5, 8), r"\(3 dims\)"),
        (DotScore(), (2, 3, 8), (4, 5, 8), "batch dims"),
        (GeneralScore(8, 6), (2, 3, 8), (2, 5, 8), "key: expected last dim 6"),
        (AdditiveScore(8, 6, 4), (2, 3, 7), (2, 5, 6), "query: expected last dim 8"),
    ],
)
def test_bad_shapes_raise_value_error(module, query_shape, key_shape, message):
    with pytest.raises(ValueError, match=message):
        module(torch.randn(query_shape), torch.randn(key_shape))


def test_dtype_mismatch_raises_value_error():
    with pytest.raises(ValueError, match="dtype"):
        DotScore()(torch.randn(3, 8), torch.randn(5, 8, dtype=torch.float64))
