"""Keys and values of other widths than the queries' (key_dim, value_dim; kdim, vdim in PyTorch)."""

import pytest
import torch
from helpers import (
    DEVICES,
    TOLERANCES,
    as_float64,
    grouped_attention_reference,
    raises,
    seeded_randn,
    seeded_tensors,
)
from torch import nn

from attnbook import (
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    mean_pool_kv_heads,
    padding_mask,
)

D_MODEL, N_HEADS, KEY_DIM, VALUE_DIM = 16, 4, 12, 8
BATCH, QUERY_LEN, KEY_LEN = 2, 5, 7
MASK_KINDS = ["none", "padding", "boolean", "additive"]


def cross_inputs(device="cpu"):
    """Seeded query (B, T, D), key (B, S, key_dim) and value (B, S, value_dim)."""
    return seeded_tensors(
        (BATCH, QUERY_LEN, D_MODEL),
        (BATCH, KEY_LEN, KEY_DIM),
        (BATCH, KEY_LEN, VALUE_DIM),
        device=device,
    )


def width_pair(device, *, bias=True):
    """Our module on ``device`` and, as the reference, nn.MultiheadAttention in float64 (CPU)."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(
        D_MODEL, N_HEADS, bias=bias, batch_first=True, kdim=KEY_DIM, vdim=VALUE_DIM
    )
    ours = MultiHeadAttention(D_MODEL, N_HEADS, bias=bias, key_dim=KEY_DIM, value_dim=VALUE_DIM)
    ours = ours.to(device).eval().copy_weights_from(theirs)
    return ours, theirs.double().eval()


def mask_pair(kind, device):
    """Our mask (bool True = attend) and nn.MultiheadAttention's mask arguments (True = block)."""
    if kind == "none":
        return None, {}
    if kind == "padding":
        keep = padding_mask([KEY_LEN, 3], KEY_LEN, device=device)  # (B, S)
        return keep[:, None, None, :], {"key_padding_mask": ~keep.cpu()}
    if kind == "boolean":
        allowed = causal_mask(QUERY_LEN, KEY_LEN, align="bottom-right", device=device)  # (T, S)
        return allowed, {"attn_mask": ~allowed.cpu()}
    added = seeded_randn(QUERY_LEN, KEY_LEN, device=device, seed=3)  # (T, S): added to scores
    return added, {"attn_mask": as_float64(added)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("need_weights", [True, False])
def test_key_and_value_widths_match_float64_nn_multihead(device, bias, mask_kind, need_weights):
    ours, reference = width_pair(device, bias=bias)
    query, key, value = cross_inputs(device)
    mask, torch_masks = mask_pair(mask_kind, device)
    expected, expected_weights = reference(
        as_float64(query),
        as_float64(key),
        as_float64(value),
        average_attn_weights=False,
        **torch_masks,
    )  # (B, T, D), (B, H, T, S)
    output, weights = ours(query, key, value, mask=mask, need_weights=need_weights)
    assert output.shape == (BATCH, QUERY_LEN, D_MODEL)
    torch.testing.assert_close(as_float64(output), expected, **TOLERANCES[torch.float32])
    if need_weights:
        torch.testing.assert_close(
            as_float64(weights), expected_weights, **TOLERANCES[torch.float32]
        )
    else:
        assert weights is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
@pytest.mark.parametrize("mask_kind", ["none", "padding"])
def test_grouped_heads_with_other_widths_match_float64_sdpa(device, n_kv_heads, mask_kind):
    torch.manual_seed(0)
    module = (
        GroupedQueryAttention(D_MODEL, N_HEADS, n_kv_heads, key_dim=KEY_DIM, value_dim=VALUE_DIM)
        .to(device)
        .eval()
    )
    query, key, value = cross_inputs(device)
    mask, _ = mask_pair(mask_kind, device)
    expected = grouped_attention_reference(module, query, key, value, mask=mask)  # (B, T, D)
    for need_weights in (True, False):
        output, _ = module(query, key, value, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(as_float64(output), expected, **TOLERANCES[torch.float32])


def test_only_the_key_and_value_projections_read_the_other_widths():
    module = GroupedQueryAttention(D_MODEL, N_HEADS, 2, key_dim=KEY_DIM, value_dim=VALUE_DIM)
    d_head = D_MODEL // N_HEADS
    assert (module.key_dim, module.value_dim) == (KEY_DIM, VALUE_DIM)
    assert module.q_proj.weight.shape == (D_MODEL, D_MODEL)
    assert module.k_proj.weight.shape == (2 * d_head, KEY_DIM)
    assert module.v_proj.weight.shape == (2 * d_head, VALUE_DIM)
    assert module.out_proj.weight.shape == (D_MODEL, D_MODEL)
    _, weights = module(*cross_inputs(), need_weights=True)
    assert weights.shape == (BATCH, N_HEADS, QUERY_LEN, KEY_LEN)
    default = MultiHeadAttention(D_MODEL, N_HEADS)
    assert (default.key_dim, default.value_dim) == (D_MODEL, D_MODEL)


def test_value_defaults_to_key_when_their_widths_agree():
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, N_HEADS, key_dim=KEY_DIM, value_dim=KEY_DIM).eval()
    query, key, _ = cross_inputs()
    assert torch.equal(module(query, key)[0], module(query, key, key)[0])


def test_pooling_keeps_the_widths_and_is_exact_at_the_same_head_count():
    torch.manual_seed(0)
    source = GroupedQueryAttention(D_MODEL, N_HEADS, 4, key_dim=KEY_DIM, value_dim=VALUE_DIM)
    query, key, value = cross_inputs()
    copy = mean_pool_kv_heads(source.eval(), 4)
    assert torch.equal(copy(query, key, value)[0], source(query, key, value)[0])
    pooled = mean_pool_kv_heads(source, 2)
    assert (pooled.key_dim, pooled.value_dim) == (KEY_DIM, VALUE_DIM)
    expected = grouped_attention_reference(pooled, query, key, value)  # (B, T, D) float64
    torch.testing.assert_close(
        as_float64(pooled(query, key, value)[0]), expected, **TOLERANCES[torch.float32]
    )


def test_inputs_of_the_wrong_width_name_the_width_expected():
    module = MultiHeadAttention(D_MODEL, N_HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM)
    query, key, value = cross_inputs()
    with raises("key: expected shape (B, S, key_dim) with key_dim = 12, got key.shape = (2, 7, 8)"):
        module(query, key[..., :8], value)
    with raises(
        "value: expected shape (B, S, value_dim) with value_dim = 8, got value.shape = (2, 7, 12)"
    ):
        module(query, key, key)
    with raises("query: expected shape (B, T, D) with D = d_model = 16, got query.shape"):
        module(key, key, value)
    with raises("value: expected shape (B, S, value_dim) with S = 7 as in key, got value.shape"):
        module(query, key, value[:, :3])


def test_left_out_key_or_value_of_another_width_must_be_passed():
    query, key, _ = cross_inputs()
    module = MultiHeadAttention(D_MODEL, N_HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM)
    with raises(
        "key: expected a key of shape (B, S, key_dim) with key_dim = 12; the queries' width "
        "d_model = 16 differs, so key = query cannot work: pass key and value"
    ):
        module(query)
    with raises(
        "value: expected a value of shape (B, S, value_dim) with value_dim = 8; the keys' width "
        "key_dim = 12 differs, so value = key cannot work: pass value (and key)"
    ):
        module(query, key)
    with raises("value: expected a value of shape (B, S, value_dim) with value_dim = 8; the keys'"):
        MultiHeadAttention(D_MODEL, N_HEADS, value_dim=VALUE_DIM)(query)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"key_dim": 0}, "key_dim: expected a positive int, got 0"),
        ({"value_dim": 8.0}, "value_dim: expected a positive int, got 8.0"),
        ({"key_dim": True}, "key_dim: expected a positive int, got True"),
        (
            {"rope": True, "key_dim": 12},
            "key_dim: rope=True needs self-attention (keys and values from the query's tokens), "
            "so key_dim must equal d_model = 16, got 12",
        ),
        (
            {"rope": True, "value_dim": 8},
            "value_dim: rope=True needs self-attention (keys and values from the query's "
            "tokens), so value_dim must equal d_model = 16, got 8",
        ),
    ],
)
def test_bad_widths_are_refused_when_the_layer_is_built(arguments, message):
    with raises(message):
        GroupedQueryAttention(D_MODEL, N_HEADS, 2, **arguments)


@pytest.mark.parametrize(
    ("torch_widths", "got"),
    [
        ({"vdim": VALUE_DIM}, "kdim = 16, vdim = 8"),
        ({"kdim": KEY_DIM, "vdim": KEY_DIM}, "kdim = 12, vdim = 12"),
    ],
)
def test_copy_weights_refuses_other_key_and_value_widths(torch_widths, got):
    torch_mha = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True, **torch_widths)
    ours = MultiHeadAttention(D_MODEL, N_HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM)
    with raises(
        "torch_mha: expected embed_dim = 16, num_heads = 4, kdim = 12, vdim = 8, bias = True, "
        f"extra key/value = False; got embed_dim = 16, num_heads = 4, {got}, bias = True"
    ):
        ours.copy_weights_from(torch_mha)
