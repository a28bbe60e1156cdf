"""KV-cache arithmetic and the mean-pooling conversion from multi-head to grouped-query heads."""

import pytest
import torch
from helpers import (
    DEVICES,
    TOLERANCES,
    as_float64,
    grouped_attention_reference,
    raises,
    seeded_randn,
)

from attnbook import (
    GroupedQueryAttention,
    MultiHeadAttention,
    kv_cache_bytes_per_token,
    mean_pool_kv_heads,
    split_heads,
)

D_MODEL, N_HEADS = 32, 8
HEAD_DIM = D_MODEL // N_HEADS
KIB = 1024


# (layers, KV heads, head width) from the models' published configs; fp16 KiB per token.
@pytest.mark.parametrize(
    ("n_layers", "n_kv_heads", "head_dim", "kib"),
    [(32, 32, 128, 512), (80, 8, 128, 320), (32, 8, 128, 128)],
    ids=["llama-2-7b", "llama-2-70b", "mistral-7b/llama-3-8b"],
)
def test_bytes_per_token_of_public_configs(n_layers, n_kv_heads, head_dim, kib):
    assert kv_cache_bytes_per_token(n_layers, n_kv_heads, head_dim, 2) == kib * KIB
    assert kv_cache_bytes_per_token(n_layers, n_kv_heads, head_dim, torch.float16) == kib * KIB


@pytest.mark.parametrize(
    ("dtype", "size"), [(torch.float32, 4), (torch.bfloat16, 2), (torch.int8, 1)], ids=str
)
def test_a_dtype_counts_its_itemsize(dtype, size):
    assert kv_cache_bytes_per_token(2, 3, 5, dtype) == 2 * 2 * 3 * 5 * size


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_kv_heads", [1, 2, 8])
def test_bytes_per_token_equals_the_bytes_of_cached_tensors(device, n_kv_heads):
    n_layers, n_tokens = 3, 7
    torch.manual_seed(0)
    layers = [
        GroupedQueryAttention(D_MODEL, N_HEADS, n_kv_heads).to(device) for _ in range(n_layers)
    ]
    x = seeded_randn(1, n_tokens, D_MODEL, device=device)
    cached = 0
    for layer in layers:
        for projection in (layer.k_proj, layer.v_proj):
            heads = split_heads(projection(x), n_kv_heads)  # (B, H_kv, S, d_head)
            cached += heads.numel() * heads.element_size()
    per_token = kv_cache_bytes_per_token(n_layers, n_kv_heads, HEAD_DIM, torch.float32)
    assert cached == n_tokens * per_token


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 8, 128), "n_layers: expected a positive int, got 0"),
        ((32, True, 128), "n_kv_heads: expected a positive int, got True"),
        ((32, 8, 12.5), "head_dim: expected a positive int, got 12.5"),
        ((32, 8, 128, -2), "bytes_per_element: expected a positive int, got -2"),
    ],
)
def test_bytes_per_token_rejects_bad_sizes(args, message):
    with raises(message):
        kv_cache_bytes_per_token(*args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_pooling_to_the_same_head_count_is_an_exact_copy(device, need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).to(device).eval()
    copy = mean_pool_kv_heads(mha, N_HEADS)
    x = seeded_randn(2, 5, D_MODEL, device=device)
    assert type(copy) is GroupedQueryAttention and copy.n_kv_heads == N_HEADS
    expected, _ = mha(x, need_weights=need_weights)
    assert torch.equal(copy(x, need_weights=need_weights)[0], expected)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_pooled_keys_and_values_are_the_group_means(n_kv_heads):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    gqa = mean_pool_kv_heads(mha, n_kv_heads)
    group_size = N_HEADS // n_kv_heads
    x = seeded_randn(2, 5, D_MODEL)
    for old, new in ((mha.k_proj, gqa.k_proj), (mha.v_proj, gqa.v_proj)):
        heads = split_heads(old(x), N_HEADS)  # (B, H, S, d_head)
        group_means = heads.unflatten(1, (n_kv_heads, group_size)).mean(dim=2)  # (B, H_kv, S, d)
        torch.testing.assert_close(split_heads(new(x), n_kv_heads), group_means)
    for name in ("q_proj", "out_proj"):
        for old, new in zip(
            getattr(mha, name).parameters(), getattr(gqa, name).parameters(), strict=True
        ):
            assert torch.equal(old, new)


def test_pooling_is_exact_when_the_heads_of_each_group_already_agree():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    with torch.no_grad():
        for projection in (mha.k_proj, mha.v_proj):  # give each pair of heads the same rows
            weight = projection.weight.view(N_HEADS // 2, 2, HEAD_DIM, D_MODEL)
            weight[:, 1] = weight[:, 0]
            bias = projection.bias.view(N_HEADS // 2, 2, HEAD_DIM)
            bias[:, 1] = bias[:, 0]
    gqa = mean_pool_kv_heads(mha, N_HEADS // 2)
    x = seeded_randn(2, 5, D_MODEL)
    torch.testing.assert_close(gqa(x)[0], mha(x)[0])


def test_pooled_module_matches_float64_sdpa_with_enable_gqa():
    torch.manual_seed(0)
    gqa = mean_pool_kv_heads(MultiHeadAttention(D_MODEL, N_HEADS), 2).eval()
    x = seeded_randn(2, 6, D_MODEL)
    expected = grouped_attention_reference(gqa, x, is_causal=True)  # (B, T, D) float64
    for need_weights in (True, False):
        output, _ = gqa(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(as_float64(output), expected, **TOLERANCES[torch.float32])


def test_a_grouped_source_pools_again_and_keeps_its_settings():
    torch.manual_seed(0)
    source = GroupedQueryAttention(D_MODEL, N_HEADS, 4, bias=False, dropout=0.25).double()
    source.eval()
    pooled = mean_pool_kv_heads(source, 2)
    assert pooled.n_kv_heads == 2 and pooled.dropout == 0.25 and not pooled.training
    assert pooled.k_proj.bias is None and pooled.q_proj.weight.dtype == torch.float64
    direct = mean_pool_kv_heads(mean_pool_kv_heads(source, 4), 2)
    torch.testing.assert_close(direct.v_proj.weight, pooled.v_proj.weight)


def test_pooling_leaves_the_source_untouched_and_shares_no_storage():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    before = {name: p.clone() for name, p in mha.state_dict().items()}
    gqa = mean_pool_kv_heads(mha, 1)
    assert gqa.training
    with torch.no_grad():
        gqa.q_proj.weight.zero_()
    for name, param in mha.state_dict().items():
        assert torch.equal(param, before[name]), name


def test_pooling_rejects_bad_arguments():
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    with raises("n_kv_heads: 3 does not divide the 8 key/value heads of attention"):
        mean_pool_kv_heads(mha, 3)
    with raises("n_kv_heads: expected a positive int, got 0"):
        mean_pool_kv_heads(mha, 0)
    with raises("n_kv_heads: 4 does not divide the 2 key/value heads of attention"):
        mean_pool_kv_heads(GroupedQueryAttention(D_MODEL, N_HEADS, 2), 4)
    with raises("attention: expected a MultiHeadAttention or GroupedQueryAttention, got"):
        mean_pool_kv_heads(torch.nn.MultiheadAttention(D_MODEL, N_HEADS), 2)
