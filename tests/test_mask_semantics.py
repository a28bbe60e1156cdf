"""What the masks chapter shows about mask semantics, held as tests of the library."""

import pytest
import torch
from helpers import DEVICES
from torch import nn

from attnbook import (
    MultiHeadAttention,
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)

D_MODEL, N_HEADS = 16, 2
LENGTHS, MAX_LEN = [6, 4, 2], 6


def module_and_inputs(device, seed=0):
    torch.manual_seed(seed)
    module = MultiHeadAttention(D_MODEL, N_HEADS).to(device).eval()
    x = torch.randn(1, MAX_LEN, D_MODEL, generator=torch.Generator().manual_seed(seed + 1))
    return module, x.to(device)


def test_mask_before_softmax_equals_renormalising_after():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 5, 7, generator=generator)
    keep = torch.rand(3, 5, 7, generator=generator) > 0.4
    keep[..., 0] = True  # renormalising needs at least one kept key per row
    kept = torch.softmax(scores, dim=-1) * keep
    torch.testing.assert_close(masked_softmax(scores, keep), kept / kept.sum(dim=-1, keepdim=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_flipped_causal_mask_lets_earlier_outputs_see_later_tokens(device, need_weights):
    module, x = module_and_inputs(device)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, MAX_LEN - 3, D_MODEL).to(device)
    causal = causal_mask(MAX_LEN, device=device)
    for mask, earlier_outputs_move in ((causal, False), (~causal, True)):
        before, _ = module(x, mask=mask, need_weights=need_weights)
        after, _ = module(changed, mask=mask, need_weights=need_weights)
        moved = (after[:, :3] - before[:, :3]).abs().amax(dim=-1) > 0  # (1, 3)
        assert bool(moved.all()) is earlier_outputs_move


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_left_and_right_padding_give_real_tokens_the_same_outputs(device, need_weights):
    module, _ = module_and_inputs(device)
    tokens = torch.randn(len(LENGTHS), MAX_LEN, D_MODEL, generator=torch.Generator().manual_seed(3))
    right = torch.zeros_like(tokens)
    left = torch.zeros_like(tokens)
    for b, length in enumerate(LENGTHS):
        right[b, :length] = tokens[b, :length]
        left[b, MAX_LEN - length :] = tokens[b, :length]
    causal = causal_mask(MAX_LEN, device=device)
    masks = {
        side: padding_mask(LENGTHS, MAX_LEN, side=side, device=device)[:, None, None, :] & causal
        for side in ("right", "left")
    }  # (B, 1, S, S) each
    right_out, _ = module(right.to(device), mask=masks["right"], need_weights=need_weights)
    left_out, _ = module(left.to(device), mask=masks["left"], need_weights=need_weights)
    assert torch.isfinite(left_out).all()  # left padding + causal has fully masked pad rows
    for b, length in enumerate(LENGTHS):
        torch.testing.assert_close(right_out[b, :length], left_out[b, MAX_LEN - length :])
    pad_rows = left_out[~padding_mask(LENGTHS, MAX_LEN, side="left", device=device)]
    torch.testing.assert_close(pad_rows, module.out_proj.bias.expand_as(pad_rows))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_padding_and_causal_together_match_nn_multihead_with_both_masks_negated(
    device, need_weights
):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).to(device).eval()
    ours = MultiHeadAttention(D_MODEL, N_HEADS).to(device).eval().copy_weights_from(theirs)
    x = torch.randn(len(LENGTHS), MAX_LEN, D_MODEL).to(device)
    keep = padding_mask(LENGTHS, MAX_LEN, device=device)  # (B, S), right padding
    causal = causal_mask(MAX_LEN, device=device)
    expected, _ = theirs(x, x, x, attn_mask=~causal, key_padding_mask=~keep)
    output, _ = ours(x, mask=keep[:, None, None, :] & causal, need_weights=need_weights)
    torch.testing.assert_close(output, expected)


@pytest.mark.parametrize("need_weights", [True, False])
def test_float_subsequent_mask_equals_boolean_causal_mask(need_weights):
    module, x = module_and_inputs("cpu")
    float_mask = nn.Transformer.generate_square_subsequent_mask(MAX_LEN)  # 0 / -inf
    from_float, _ = module(x, mask=float_mask, need_weights=need_weights)
    from_bool, _ = module(x, mask=causal_mask(MAX_LEN), need_weights=need_weights)
    torch.testing.assert_close(from_float, from_bool)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("new_len", [1, 3, 6])
def test_bottom_right_mask_gives_the_last_rows_of_full_causal_attention(device, new_len):
    module, x = module_and_inputs(device)
    full, _ = module(x, is_causal=True)
    new = x[:, -new_len:]  # the last new_len positions are the new queries
    mask = causal_mask(new_len, MAX_LEN, align="bottom-right", device=device)
    for need_weights in (True, False):
        cached, _ = module(new, x, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(cached, full[:, -new_len:])


def test_dropout_keeps_the_expected_row_sum_at_one():
    torch.manual_seed(0)
    queries, keys = torch.randn(2, 4000, 16, 8).unbind(0)
    _, weights = scaled_dot_product_attention(queries, keys, keys, dropout_p=0.25)
    row_sums = weights.sum(dim=-1)  # (4000, 16)
    assert (row_sums - 1).abs().max() > 0.1  # single rows do not sum to one
    assert abs(row_sums.mean().item() - 1) < 0.01  # their mean does


def test_module_dropout_rows_sum_to_one_in_eval_mode():
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.25).eval()
    _, weights = module(torch.randn(2, 5, D_MODEL), need_weights=True)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, N_HEADS, 5))


def test_causal_mask_counts_t_times_t_plus_one_over_two():
    for length in (1, 2, 7, 64):
        assert int(causal_mask(length).sum()) == length * (length + 1) // 2


def test_renormalising_after_the_softmax_underflows_where_masking_first_does_not():
    scores = torch.tensor([[0.0, 200.0]])  # (T, S): the blocked key dominates
    keep = torch.tensor([[True, False]])  # (T, S)
    kept = torch.softmax(scores, dim=-1) * keep
    assert torch.isnan(kept / kept.sum(dim=-1, keepdim=True)).all()
    assert torch.equal(masked_softmax(scores, keep), torch.tensor([[1.0, 0.0]]))


@pytest.mark.parametrize(
    ("training", "need_weights", "nan"),
    [(False, True, True), (False, False, True), (True, True, True), (True, False, False)],
)
def test_nn_multihead_empty_rows_are_nan_except_on_its_sdpa_path(training, need_weights, nan):
    """Chapter 4's claim on the pinned torch: NaN on the fast path and with weights, else finite."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).train(training)
    x = torch.randn(len(LENGTHS), MAX_LEN, D_MODEL)
    keep = padding_mask(LENGTHS, MAX_LEN, side="left")  # (B, S)
    with torch.no_grad():
        out, _ = theirs(
            x,
            x,
            x,
            attn_mask=~causal_mask(MAX_LEN),
            key_padding_mask=~keep,
            need_weights=need_weights,
        )  # (B, T, D)
    empty_rows = ~(keep[:, None, :] & causal_mask(MAX_LEN)).any(dim=-1)  # (B, T)
    assert bool(torch.isnan(out[empty_rows]).all()) is nan
    assert not torch.isnan(out[~empty_rows]).any()
