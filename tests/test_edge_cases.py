"""Edge cases a review found answered wrongly or with an unhelpful crash, one test each.

Each test failed before its fix: NaN or wrong numbers, a bare IndexError or RuntimeError from
deep inside, or an input silently accepted.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    TOLERANCES,
    as_float64,
    raises,
    random_qkv,
    reference_attention,
    seeded_randn,
)

from attnbook import (
    AdditiveAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    ScaledDotScore,
    TinyDecoder,
    apply_rope,
    decode_ids,
    greedy_generate,
    masked_softmax,
    merge_heads,
    plot_heads,
    random_batch,
    repeat_kv,
    scaled_dot_product_attention,
    split_heads,
    tiled_attention,
)

# Rotary embeddings in 16 bits: angles must not be rounded before cos and sin.


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rope_at_large_positions_is_as_accurate_as_rounding_the_exact_result(dtype):
    x = seeded_randn(1, 64, 32).to(dtype)  # (B, T, dim)
    positions = torch.arange(1400, 2040, 10)  # (T,)
    exact = apply_rope(as_float64(x), positions)  # rotated in float64
    error = (apply_rope(x, positions).double() - exact).abs().max().item()
    rounding = (exact.to(dtype).double() - exact).abs().max().item()
    assert error <= 4 * rounding, f"error {error:.3f} vs rounding {rounding:.3f}"  # was 7.8


def test_rope_positions_must_be_a_tensor():
    with raises("positions: expected a tensor of shape (T,), got list"):
        apply_rope(torch.randn(3, 4), [0, 1, 2])


# Integer inputs and masks.


@pytest.mark.parametrize("attention", [scaled_dot_product_attention, tiled_attention])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_non_floating_inputs_are_refused(attention, dtype):
    q = torch.ones(2, 3, 4).to(dtype)
    with raises(
        f"query: expected a floating-point tensor (float16, bfloat16, float32 or "
        f"float64), got dtype {dtype}"
    ):
        attention(q, q, q)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64])
def test_integer_masks_are_refused_by_masked_softmax_as_by_attention(dtype):
    scores = torch.randn(2, 3)
    mask = torch.ones(2, 3, dtype=dtype)
    message = "mask: expected dtype torch.bool (True = attend) or a floating dtype"
    with raises(message):
        masked_softmax(scores, mask)
    with raises(message):
        scaled_dot_product_attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 4), mask)


# Latent attention in latent space: the library's masked softmax, any dtype.


def _latent_attention(dtype=torch.float32):
    torch.manual_seed(0)
    return MultiHeadLatentAttention(16, 4, 6, rope_dim=4, bias=True).to(dtype).eval()


def test_absorbed_forward_with_a_fully_blocked_float_row_has_finite_gradients():
    mla = _latent_attention()
    x = seeded_randn(1, 3, 16).requires_grad_()
    mask = torch.zeros(3, 3)
    mask[1] = float("-inf")  # query 1 may attend to nothing
    output, weights = mla.absorbed_forward(x, mask=mask)
    output.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.equal(weights[0, :, 1], torch.zeros(4, 3))
    expected, _ = mla(x.detach(), mask=mask, need_weights=True)
    torch.testing.assert_close(output, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_absorbed_forward_takes_a_float32_mask_with_other_dtypes(dtype):
    mla = _latent_attention(dtype)
    x = seeded_randn(2, 5, 16).to(dtype)
    mask = torch.zeros(5, 5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -1e4)
    absorbed, _ = mla.absorbed_forward(x, mask=mask)
    plain, _ = mla(x, mask=mask)
    torch.testing.assert_close(absorbed, plain, **TOLERANCES.get(dtype, {}))


# Scores in float16: scale before the dot product.


def test_scaled_dot_score_in_float16_does_not_overflow():
    query = torch.full((1, 1, 256), 20.0, dtype=torch.float16)
    key = torch.full((1, 1, 256), 20.0, dtype=torch.float16)  # q . k = 102400 > 65504
    score = ScaledDotScore()(query, key)
    assert torch.isfinite(score).all()
    assert score.item() == pytest.approx(102400 / 16, rel=1e-3)


# Token ids.


def test_decode_ids_refuses_negative_ids():
    with raises("ids: expected token ids in [0, 28], got values from -1 to 3"):
        decode_ids(torch.tensor([3, -1]))


def test_tiny_decoder_refuses_ids_outside_the_vocabulary():
    model = TinyDecoder(5, d_model=8, n_heads=2, n_layers=1, max_len=8)
    with raises("tokens: expected ids in [0, vocab_size = 5), got values from 0 to 5"):
        model(torch.tensor([[0, 5]]))


def test_greedy_generate_refuses_an_empty_prompt_and_ragged_prompts():
    model = TinyDecoder(5, d_model=8, n_heads=2, n_layers=1, max_len=8)
    with raises("prompt: expected at least one token per row, got prompt.shape = (2, 0)"):
        greedy_generate(model, torch.zeros(2, 0, dtype=torch.long), 3)
    with raises("prompt: prompts of lengths [2, 3] cannot share a batch"):
        greedy_generate(model, [torch.tensor([1, 2]), torch.tensor([1, 2, 3])], 3)
    listed, _ = greedy_generate(model, [torch.tensor([1, 2]), torch.tensor([3, 4])], 3)
    stacked, _ = greedy_generate(model, torch.tensor([[1, 2], [3, 4]]), 3)
    assert torch.equal(listed, stacked)


# No keys at all (S = 0): the fully-masked-row rule, zeros, on every path.


def test_no_keys_gives_zero_output_in_the_attention_function():
    query = torch.randn(2, 3, 4, requires_grad=True)
    key, value = torch.randn(2, 0, 4), torch.randn(2, 0, 5)
    output, weights = scaled_dot_product_attention(query, key, value)
    assert output.shape == (2, 3, 5) and weights.shape == (2, 3, 0)
    assert torch.equal(output, torch.zeros(2, 3, 5))
    output.sum().backward()
    assert torch.equal(query.grad, torch.zeros(2, 3, 4))
    assert masked_softmax(torch.randn(3, 0)).shape == (3, 0)


def test_no_keys_gives_zero_output_in_additive_attention():
    attention = AdditiveAttention(4, 4, 8)
    context, weights = attention(torch.randn(2, 1, 4), torch.randn(2, 0, 4), torch.randn(2, 0, 6))
    assert torch.equal(context, torch.zeros(2, 1, 6)) and weights.shape == (2, 1, 0)


@pytest.mark.parametrize("need_weights", [True, False])
def test_no_keys_gives_zero_output_in_both_module_paths(need_weights):
    torch.manual_seed(0)
    attention = GroupedQueryAttention(8, 4, 2, bias=False).eval()
    query, memory = torch.randn(2, 3, 8), torch.randn(2, 0, 8)
    output, _ = attention(query, memory, need_weights=need_weights)
    assert torch.equal(output, torch.zeros(2, 3, 8))


# Scales.


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), True, "0.5"])
def test_scale_must_be_a_finite_number(scale):
    q = torch.randn(2, 3, 4)
    for call in (
        lambda: scaled_dot_product_attention(q, q, q, scale=scale),
        lambda: tiled_attention(q, q, q, scale=scale),
        lambda: ScaledDotScore(scale),
    ):
        with raises(f"scale: expected a finite number or None, got {scale!r}"):
            call()


# Batch dims broadcast as in PyTorch.


@pytest.mark.parametrize(
    "key_batch", [(1, 3), (3,), (2, 1)], ids=["broadcast B", "fewer dims", "broadcast H"]
)
def test_batch_dims_broadcast_as_in_pytorch(key_batch):
    query, _, _ = random_qkv(2, 3, 5, 7, 8)
    generator = torch.Generator().manual_seed(3)
    key = torch.randn(*key_batch, 7, 8, generator=generator)
    value = torch.randn(*key_batch, 7, 6, generator=generator)
    expected = F.scaled_dot_product_attention(query, key, value)
    output, weights = scaled_dot_product_attention(query, key, value)
    torch.testing.assert_close(output, expected)
    assert weights.shape == (2, 3, 5, 7)
    torch.testing.assert_close(tiled_attention(query, key, value, block_k=3), expected)
    reference, _ = reference_attention(query, key.expand(2, 3, 7, 8), value.expand(2, 3, 7, 6))
    torch.testing.assert_close(output.double(), reference, **TOLERANCES[torch.float32])


# Heads.


def test_split_heads_checks_its_input():
    with raises("n_heads: the width 10 of x.shape = (2, 3, 10) is not divisible by n_heads = 4"):
        split_heads(torch.randn(2, 3, 10), 4)
    with raises("n_heads: expected a positive int, got 0"):
        split_heads(torch.randn(2, 3, 8), 0)
    with raises("x: expected shape (B, T, H * d_head) (3 dims), got x.shape = (3, 8)"):
        split_heads(torch.randn(3, 8), 2)


def test_merge_heads_checks_its_rank():
    with raises("x: expected shape (B, H, T, d_head) (4 dims), got x.shape = (2, 3, 8)"):
        merge_heads(torch.randn(2, 3, 8))


def test_repeat_kv_checks_its_input():
    with raises("n_repeats: expected a positive int, got 0"):
        repeat_kv(torch.randn(1, 2, 3, 4), 0)
    with raises("x: expected shape (B, H_kv, S, d_head) (4 dims), got x.shape = (2, 3, 4)"):
        repeat_kv(torch.randn(2, 3, 4), 2)


# Widths, figures, weights to copy, generators.


def test_zero_feature_width_is_refused():
    with raises("query: expected at least one feature in the last dim, got query.shape = (2, 0)"):
        scaled_dot_product_attention(torch.randn(2, 0), torch.randn(3, 0), torch.randn(3, 4))


@pytest.mark.parametrize("width", [0, -2])
def test_score_modules_refuse_non_positive_widths(width):
    from attnbook import AdditiveScore, GeneralScore

    with raises(f"query_dim: expected a positive int, got {width}"):
        GeneralScore(width, 4)
    with raises(f"hidden_dim: expected a positive int, got {width}"):
        AdditiveScore(4, 4, width)


def test_plot_heads_refuses_zero_heads_and_zero_columns():
    with raises("weights: expected at least one head, got shape (0, 2, 2)"):
        plot_heads(torch.zeros(0, 2, 2))
    with raises("ncols: expected a positive int, got 0"):
        plot_heads(torch.rand(2, 2, 2), ncols=0)


def test_copy_weights_from_needs_a_torch_module():
    with raises("torch_mha: expected a torch.nn.MultiheadAttention, got NoneType"):
        MultiHeadAttention(8, 2).copy_weights_from(None)


def test_additive_attention_refuses_a_value_of_another_dtype():
    attention = AdditiveAttention(4, 4, 8)
    q = torch.randn(1, 2, 4)
    with raises("value: dtype torch.float64 does not match query's torch.float32"):
        attention(q, q, q.double())


def test_random_batch_needs_its_generator():
    with raises(
        "generator: expected a torch.Generator (the offsets come from it alone), got NoneType"
    ):
        random_batch(torch.arange(20), 2, 4, None)


def test_head_width_scale_is_used_by_the_fused_and_explicit_module_paths_alike():
    torch.manual_seed(0)
    attention = GroupedQueryAttention(16, 4, 2).eval()
    x = seeded_randn(2, 5, 16)
    fused, _ = attention(x, is_causal=True)
    explicit, weights = attention(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(fused, explicit)
    assert math.isclose(weights.sum(-1).mean().item(), 1.0, rel_tol=1e-6)
