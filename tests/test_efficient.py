"""Online softmax, tiled attention and the tensor memory meter (attnbook.efficient.tiled)."""

import pytest
import torch
from helpers import DEVICES, TOLERANCES, random_qkv, reference_attention

from attnbook import (
    TensorMemoryMeter,
    causal_mask,
    masked_softmax,
    online_softmax,
    padding_mask,
    scaled_dot_product_attention,
    tiled_attention,
)


def close_to_reference(output, query, key, value, mask=None):
    expected, _ = reference_attention(query, key, value, mask)
    tolerance = TOLERANCES[output.dtype]
    torch.testing.assert_close(output.cpu().to(torch.float64), expected, **tolerance)


@pytest.mark.parametrize("block_size", [1, 3, 16, 100])
def test_online_softmax_equals_torch_softmax(block_size):
    scores = torch.randn(3, 5, 37, generator=torch.Generator().manual_seed(0)) * 10
    torch.testing.assert_close(online_softmax(scores, block_size), torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_online_softmax_refuses_scores_that_are_not_real_floats(dtype):
    scores = torch.ones(2, 5, dtype=dtype)
    with pytest.raises(ValueError, match=f"scores: expected a floating-point tensor.*{dtype}"):
        online_softmax(scores)


def test_online_softmax_handles_masked_entries_and_rows():
    scores = torch.randn(4, 20)
    scores[0] = float("-inf")  # nothing to attend to: zeros
    scores[1, :12] = float("-inf")  # the first blocks are all -inf: the running max stays -inf
    result = online_softmax(scores, block_size=5)
    torch.testing.assert_close(result, masked_softmax(scores))
    assert torch.equal(result[0], torch.zeros(20))
    assert not result.isnan().any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize(("query_len", "key_len"), [(1, 1), (37, 37), (13, 50), (50, 13)])
def test_tiled_matches_reference(device, dtype, query_len, key_len):
    query, key, value = random_qkv(
        2, 3, query_len, key_len, 8, value_dim=5, dtype=dtype, device=device
    )
    output = tiled_attention(query, key, value, block_q=7, block_k=10)
    assert output.shape == (2, 3, query_len, 5) and output.dtype == dtype
    close_to_reference(output, query, key, value)


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
@pytest.mark.parametrize(("query_len", "key_len"), [(29, 29), (13, 50), (50, 13)])
def test_tiled_causal_matches_the_explicit_mask(align, query_len, key_len):
    query, key, value = random_qkv(2, 2, query_len, key_len, 8)
    mask = causal_mask(query_len, key_len, align=align)  # (T, S)
    output = tiled_attention(
        query, key, value, is_causal=True, causal_align=align, block_q=6, block_k=8
    )
    expected, _ = scaled_dot_product_attention(query, key, value, mask)
    torch.testing.assert_close(output, expected)
    close_to_reference(output, query, key, value, mask)


def test_tiled_is_causal_default_is_top_left_like_the_library():
    query, key, value = random_qkv(1, 2, 9, 21, 4)
    expected, _ = scaled_dot_product_attention(query, key, value, is_causal=True)
    torch.testing.assert_close(
        tiled_attention(query, key, value, is_causal=True, block_k=4), expected
    )


def test_tiled_padding_and_float_masks_and_fully_masked_rows():
    query, key, value = random_qkv(3, 2, 11, 17, 8)
    keep = padding_mask([17, 5, 0], 17)[:, None, None, :]  # (B, 1, 1, S): item 2 sees nothing
    output = tiled_attention(query, key, value, keep, block_q=4, block_k=6)
    expected, _ = scaled_dot_product_attention(query, key, value, keep)
    torch.testing.assert_close(output, expected)
    assert torch.equal(output[2], torch.zeros_like(output[2]))
    additive = torch.randn(11, 17)  # (T, S), added to the scores
    torch.testing.assert_close(
        tiled_attention(query, key, value, additive, block_k=5),
        scaled_dot_product_attention(query, key, value, additive)[0],
    )


def test_tiled_gradients_match_explicit():
    inputs = random_qkv(1, 2, 10, 14, 4, dtype=torch.float64)
    tiled_inputs = [t.clone().requires_grad_() for t in inputs]
    explicit_inputs = [t.clone().requires_grad_() for t in inputs]
    tiled_attention(*tiled_inputs, is_causal=True, block_q=3, block_k=4).sum().backward()
    scaled_dot_product_attention(*explicit_inputs, is_causal=True)[0].sum().backward()
    for ours, theirs in zip(tiled_inputs, explicit_inputs, strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_k": 0}, "block_k: expected a positive int"),
        ({"block_q": 2.5}, "block_q: expected a positive int"),
        ({"is_causal": True, "causal_align": "left"}, "causal_align: expected one of"),
        ({"mask": causal_mask(4), "is_causal": True}, "got both a mask and is_causal"),
    ],
)
def test_tiled_rejects_bad_arguments(kwargs, message):
    query, key, value = random_qkv(1, 1, 4, 4, 2)
    with pytest.raises(ValueError, match=message):
        tiled_attention(query, key, value, **kwargs)


def test_meter_counts_new_tensors_not_inputs_or_views():
    x = torch.zeros(1000)  # made before the block: not counted
    with TensorMemoryMeter() as meter:
        view = x.view(10, 100)  # no new memory
        y = x + 1  # 4000 bytes
        y.mul_(2)  # in place: nothing new
        y_view = y[:500]  # a view of counted memory: nothing new
        z = torch.ones(250, dtype=torch.float64)  # 2000 bytes
        assert meter.live_bytes == 6000
        del y, z  # y's memory lives on in y_view
        assert meter.live_bytes == 4000
        del y_view
    assert meter.peak_bytes == 6000 and meter.live_bytes == 0
    assert view.shape == (10, 100)


def test_tiled_needs_far_less_memory_than_explicit():
    query, key, value = random_qkv(1, 2, 512, 512, 16)
    peaks = {}
    for name, attend in (
        ("explicit", lambda: scaled_dot_product_attention(query, key, value)),
        ("tiled", lambda: tiled_attention(query, key, value, block_q=64, block_k=64)),
    ):
        with torch.no_grad(), TensorMemoryMeter() as meter:
            attend()
        peaks[name] = meter.peak_bytes
    score_bytes = 2 * 512 * 512 * 4  # one (B, H, T, S) float32 tensor
    assert peaks["explicit"] >= 2 * score_bytes
    assert peaks["tiled"] < score_bytes / 4
