"""MultiHeadAttention and GroupedQueryAttention against PyTorch's modules and functions."""

import pytest
import torch
from helpers import (
    DEVICES,
    TOLERANCES,
    as_float64,
    grouped_attention_reference,
    mha_pair,
    raises,
    seeded_randn,
)
from torch import nn

from attnbook import (
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    mean_pool_kv_heads,
    merge_heads,
    padding_mask,
    repeat_kv,
    split_heads,
)

D_MODEL, N_HEADS = 16, 4


def make_pair(device, *, bias=True):
    return mha_pair(D_MODEL, N_HEADS, device, bias=bias)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_nn_multihead(device, bias):
    ours, theirs = make_pair(device, bias=bias)
    x = seeded_randn(2, 5, D_MODEL, device=device)
    expected, expected_weights = theirs(x, x, x, average_attn_weights=False)
    output, weights = ours(x, need_weights=True)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(ours(x)[0], expected)


@pytest.mark.parametrize("device", DEVICES)
def test_causal_mask_polarity_is_opposite_to_nn_multihead(device):
    ours, theirs = make_pair(device)
    x = seeded_randn(2, 6, D_MODEL, device=device)
    allowed = causal_mask(6, device=device)  # True = attend (ours, SDPA)
    expected, _ = theirs(x, x, x, attn_mask=~allowed)  # True = block (nn.MultiheadAttention)
    for need_weights in (True, False):
        torch.testing.assert_close(ours(x, mask=allowed, need_weights=need_weights)[0], expected)
        torch.testing.assert_close(ours(x, is_causal=True, need_weights=need_weights)[0], expected)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_attention_with_padding_matches_nn_multihead(device):
    ours, theirs = make_pair(device)
    query, memory = (
        seeded_randn(3, 4, D_MODEL, device=device),
        seeded_randn(3, 7, D_MODEL, device=device, seed=2),
    )
    lengths = torch.tensor([7, 5, 2])
    keep = padding_mask(lengths, 7, device=device)  # (B, S)
    expected, _ = theirs(query, memory, memory, key_padding_mask=~keep)
    output, weights = ours(query, memory, mask=keep[:, None, None, :], need_weights=True)
    torch.testing.assert_close(output, expected)
    assert weights.shape == (3, N_HEADS, 4, 7)
    assert torch.equal(weights[1, ..., 5:], torch.zeros_like(weights[1, ..., 5:]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_gqa_both_paths_match_float64_sdpa_with_enable_gqa(device, n_kv_heads):
    torch.manual_seed(0)
    module = GroupedQueryAttention(D_MODEL, N_HEADS, n_kv_heads).to(device).eval()
    x = seeded_randn(2, 6, D_MODEL, device=device)
    expected = grouped_attention_reference(module, x, is_causal=True)  # (B, T, D) float64
    explicit, weights = module(x, is_causal=True, need_weights=True)
    fused, none = module(x, is_causal=True)
    torch.testing.assert_close(as_float64(explicit), expected, **TOLERANCES[torch.float32])
    torch.testing.assert_close(as_float64(fused), expected, **TOLERANCES[torch.float32])
    assert none is None and weights.shape == (2, N_HEADS, 6, 6)


@pytest.mark.parametrize("device", DEVICES)
def test_gqa_with_as_many_kv_heads_as_heads_matches_nn_multihead(device):
    mha, theirs = make_pair(device)
    gqa = GroupedQueryAttention(D_MODEL, N_HEADS, N_HEADS).to(device).eval()
    gqa.load_state_dict(mha.state_dict())  # the weights of nn.MultiheadAttention
    x = seeded_randn(2, 5, D_MODEL, device=device)
    expected, _ = theirs(x, x, x, attn_mask=~causal_mask(5, device=device))  # True = block
    for need_weights in (True, False):
        output, _ = gqa(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(output, expected)


def test_mqa_shares_one_key_value_head():
    module = GroupedQueryAttention(D_MODEL, N_HEADS, 1)
    assert module.k_proj.out_features == D_MODEL // N_HEADS
    assert sum(p.numel() for p in module.parameters()) < sum(
        p.numel() for p in MultiHeadAttention(D_MODEL, N_HEADS).parameters()
    )


def test_repeat_kv_interleaves_groups_unlike_repeat():
    heads = torch.arange(2.0).view(1, 2, 1, 1)  # key/value heads 0 and 1
    assert repeat_kv(heads, 2).flatten().tolist() == [0.0, 0.0, 1.0, 1.0]
    assert heads.repeat(1, 2, 1, 1).flatten().tolist() == [0.0, 1.0, 0.0, 1.0]


def test_split_then_merge_heads_is_identity_and_keeps_tokens_apart():
    x = torch.arange(2 * 3 * 8.0).view(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[0, 1, 2], x[0, 2, 2:4])  # head 1 of token 2 = its features 2..3
    assert torch.equal(merge_heads(heads), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_paths_match_float64_reference(dtype):
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, N_HEADS).to(dtype).eval()
    x = seeded_randn(2, 5, D_MODEL).to(dtype)
    expected = grouped_attention_reference(module, x, is_causal=True)  # the rounded weights
    for need_weights in (True, False):
        output, _ = module(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(as_float64(output), expected, **TOLERANCES[dtype])


def test_dropout_only_in_training():
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.5)
    x = seeded_randn(2, 5, D_MODEL)
    module.eval()
    first, _ = module(x)
    torch.testing.assert_close(module(x)[0], first)
    module.train()
    _, weights = module(x, need_weights=True)
    assert (weights == 0).any()


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_query_gives_finite_output_and_gradients(need_weights):
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, N_HEADS)
    x = seeded_randn(2, 4, D_MODEL).requires_grad_(True)
    keep = torch.ones(4, 4, dtype=torch.bool)
    keep[2] = False
    output, _ = module(x, mask=keep, need_weights=need_weights)
    output.sum().backward()
    assert torch.isfinite(output).all() and torch.isfinite(x.grad).all()
    bias_only = module.out_proj.bias.expand(2, D_MODEL)  # zero heads -> out_proj(0) = its bias
    torch.testing.assert_close(output[:, 2], bias_only, **TOLERANCES[torch.float32])


def test_copy_weights_rejects_other_sizes():
    with pytest.raises(ValueError, match=r"torch_mha: expected embed_dim = 16, num_heads = 4"):
        MultiHeadAttention(D_MODEL, N_HEADS).copy_weights_from(nn.MultiheadAttention(16, 2))


@pytest.mark.parametrize(
    ("extra", "got"),
    [
        ({"add_bias_kv": True}, "kdim = 16, vdim = 16, bias = True, extra key/value = True"),
        ({"add_zero_attn": True}, "kdim = 16, vdim = 16, bias = True, extra key/value = True"),
        ({"kdim": 8}, "kdim = 8, vdim = 16, bias = True, extra key/value = False"),
        ({"bias": False}, "kdim = 16, vdim = 16, bias = False, extra key/value = False"),
    ],
)
def test_copy_weights_rejects_what_our_module_cannot_hold(extra, got):
    torch_mha = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True, **extra)
    with raises(f"; got embed_dim = 16, num_heads = 4, {got}"):
        MultiHeadAttention(D_MODEL, N_HEADS).copy_weights_from(torch_mha)


@pytest.mark.parametrize("need_weights", [True, False])
def test_pooling_a_rope_layer_to_the_same_head_count_is_an_exact_copy(need_weights):
    torch.manual_seed(0)
    source = GroupedQueryAttention(
        D_MODEL, N_HEADS, 2, rope=True, rope_base=500.0, rope_layout="adjacent"
    ).eval()
    copy = mean_pool_kv_heads(source, 2)
    assert (copy.rope, copy.rope_base, copy.rope_layout) == (True, 500.0, "adjacent")
    x = seeded_randn(2, 6, D_MODEL)
    expected, _ = source(x, is_causal=True, need_weights=need_weights)
    assert torch.equal(copy(x, is_causal=True, need_weights=need_weights)[0], expected)
