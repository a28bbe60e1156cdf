"""Positions: sinusoidal encodings, RoPE in both layouts, ALiBi, and the models that use them."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import TOLERANCES, as_float64, linear_float64, raises, seeded_randn

from attnbook import (
    GroupedQueryAttention,
    MultiHeadAttention,
    TinyDecoder,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    greedy_generate,
    make_attention,
    rope_angles,
    rope_permutation,
    scaled_dot_product_attention,
    sinusoidal_encoding,
    trace_shapes,
)

SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "none"]


def complex_rope(x, positions, layout, base=10000.0):
    """RoPE as complex multiplication in float64: pair i is the number a + ib, times e^(i t w)."""
    x = as_float64(x)
    d = x.size(-1)
    if layout == "adjacent":
        real, imag = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    else:
        real, imag = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
    frequencies = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    turn = torch.polar(torch.ones(1, dtype=torch.float64), positions[:, None] * frequencies)
    turned = torch.complex(real, imag) * turn  # (..., T, d/2)
    if layout == "adjacent":
        return torch.stack([turned.real, turned.imag], dim=-1).flatten(-2)  # (..., T, d)
    return torch.cat([turned.real, turned.imag], dim=-1)  # (..., T, d)


@pytest.mark.parametrize("layout", ["adjacent", "halves"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_is_the_complex_rotation(layout, dtype):
    x = seeded_randn(2, 3, 7, 16).to(dtype)  # (B, H, T, d)
    positions = torch.tensor([0, 1, 2, 5, 17, 40, 90])  # (T,): float32 angles stay exact
    result = apply_rope(x, positions, layout=layout)
    expected = complex_rope(x, positions, layout).to(dtype)
    torch.testing.assert_close(result, expected, **TOLERANCES.get(dtype, {}))
    assert result.dtype == dtype


def test_the_default_layout_is_adjacent_as_before():
    x, positions = seeded_randn(5, 8), torch.arange(5)  # (T, d), (T,)
    torch.testing.assert_close(
        apply_rope(x, positions), apply_rope(x, positions, layout="adjacent")
    )


@pytest.mark.parametrize("layout", ["adjacent", "halves"])
def test_the_score_depends_only_on_the_distance(layout):
    q, k = seeded_randn(1, 16, seed=1), seeded_randn(1, 16, seed=2)  # one query, one key

    def score(m, n):
        rotated_q = apply_rope(q.double(), torch.tensor([m]), layout=layout)  # (1, d)
        rotated_k = apply_rope(k.double(), torch.tensor([n]), layout=layout)  # (1, d)
        return (rotated_q @ rotated_k.T).item()

    for distance in (0, 1, 3, 17):
        at = [score(n + distance, n) for n in (0, 5, 50, 700)]
        assert max(at) - min(at) < 1e-10, f"distance {distance}: {at}"
    assert abs(score(4, 1) - score(5, 1)) > 1e-3  # and it does depend on the distance


def test_the_layouts_are_the_same_rotation_up_to_the_permutation():
    x, positions = seeded_randn(2, 9, 12), torch.arange(3, 12)  # (B, T, d), (T,)
    perm = rope_permutation(12)
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]
    adjacent = apply_rope(x, positions, layout="adjacent")
    halves = apply_rope(x[..., perm], positions, layout="halves")
    torch.testing.assert_close(adjacent[..., perm], halves)
    torch.testing.assert_close(halves[..., perm.argsort()], adjacent)
    wrong = apply_rope(x, positions, layout="halves")  # a checkpoint read in the wrong layout
    assert (wrong - adjacent).abs().max() > 0.1


def test_sinusoidal_encoding_follows_the_formula_and_its_dot_product_the_distance():
    positions, d = torch.arange(50), 32
    encoding = sinusoidal_encoding(positions, d, dtype=torch.float64)  # (T, d)
    t = positions[:, None].double()  # (T, 1)
    frequencies = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    torch.testing.assert_close(encoding[:, 0::2], torch.sin(t * frequencies))
    torch.testing.assert_close(encoding[:, 1::2], torch.cos(t * frequencies))
    dots = encoding @ encoding.T  # (T, T)
    for distance in (0, 1, 7):
        diagonal = dots.diagonal(offset=distance)
        torch.testing.assert_close(diagonal, torch.full_like(diagonal, diagonal[0].item()))
    assert sinusoidal_encoding(positions, d, dtype=torch.float16).dtype == torch.float16


def test_alibi_slopes_follow_the_paper():
    assert alibi_slopes(8).tolist() == [1 / 2**i for i in range(1, 9)]
    assert alibi_slopes(16).tolist() == [2 ** (-i / 2) for i in range(1, 17)]
    # 6 heads: the 4 slopes of 4 heads, then every other slope of 8 heads (1/2, 1/8).
    assert alibi_slopes(6).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    assert alibi_slopes(12).tolist()[8:] == alibi_slopes(16).tolist()[0::2][:4]
    assert alibi_slopes(1).tolist() == [1 / 256]


def test_alibi_bias_is_a_causal_distance_penalty_aligned_bottom_right():
    bias = alibi_bias(4, 5)  # (H, T, S)
    slopes = alibi_slopes(4)
    for h, i, j in [(0, 4, 1), (3, 2, 2), (1, 3, 0)]:
        assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * (i - j))
    assert torch.isneginf(bias[:, 1, 2:]).all() and not torch.isinf(bias[:, 1, :2]).any()
    torch.testing.assert_close(alibi_bias(4, 2, 5), bias[:, 3:])  # the last 2 queries
    assert alibi_bias(4, 3, dtype=torch.float64).dtype == torch.float64


def test_alibi_through_the_library_attention_equals_a_float64_reference():
    q, k, v = (seeded_randn(2, 4, 6, 8, seed=s) for s in (1, 2, 3))  # (B, H, T, d) each
    bias = alibi_bias(4, 6)  # (H, T, S)
    output, weights = scaled_dot_product_attention(q, k, v, bias)
    scores = as_float64(q) @ as_float64(k).transpose(-2, -1) / math.sqrt(8)  # (B, H, T, S)
    expected_weights = torch.softmax(scores + as_float64(bias), dim=-1)  # (B, H, T, S)
    torch.testing.assert_close(weights.double(), expected_weights, **TOLERANCES[torch.float32])
    torch.testing.assert_close(output.double(), expected_weights @ as_float64(v), atol=1e-5, rtol=0)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(output, fused)


def rope_layer(layout="halves", n_kv_heads=2, bias=False):
    torch.manual_seed(0)
    layer = GroupedQueryAttention(32, 4, n_kv_heads, bias=bias, rope=True, rope_layout=layout)
    return layer.eval()


def rotate_half(x):
    """GPT-NeoX / Llama's helper: (x1, x2) -> (-x2, x1) on the two halves of the features."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def llama_attention_float64(layer, x, base=10000.0):
    """A Llama attention layer written out in float64: project, rotate halves, SDPA with GQA."""
    batch, length, _ = x.shape
    d_head = layer.head_dim

    def heads(projection, count):
        projected = linear_float64(projection, x)  # (B, T, count * d_head)
        return projected.view(batch, length, count, d_head).transpose(1, 2)  # (B, count, T, dh)

    q, k, v = heads(layer.q_proj, 4), heads(layer.k_proj, 2), heads(layer.v_proj, 2)
    inverse_frequencies = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inverse_frequencies  # (T, dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, d_head)
    q = q * angles.cos() + rotate_half(q) * angles.sin()  # (B, H, T, d_head)
    k = k * angles.cos() + rotate_half(k) * angles.sin()  # (B, H_kv, T, d_head)
    attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    merged = attended.transpose(1, 2).reshape(batch, length, -1)  # (B, T, D)
    return linear_float64(layer.out_proj, merged)  # (B, T, D)


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_llama_style_layer_equals_the_computation_written_out(need_weights):
    layer = rope_layer()
    assert layer.q_proj.bias is None and layer.rope_layout == "halves"
    x = seeded_randn(2, 7, 32)  # (B, T, D)
    with torch.no_grad():
        output, _ = layer(x, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(
        output.double(), llama_attention_float64(layer, x), atol=2e-6, rtol=0
    )


@pytest.mark.parametrize("layout", ["adjacent", "halves"])
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_rope_gqa_decoding_with_the_cache_equals_one_causal_pass(layout, n_kv_heads):
    layer = rope_layer(layout, n_kv_heads, bias=True)
    x = seeded_randn(2, 9, 32)  # (B, T, D)
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)  # (B, T, D)
        cache = layer.new_cache()
        steps = [layer(x[:, :4], is_causal=True, cache=cache)[0]]  # prefill 4 positions
        steps += [layer(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    keys = layer.k_proj(x).view(2, 9, n_kv_heads, 8).transpose(1, 2)  # (B, H_kv, T, d_head)
    rotated = apply_rope(keys, torch.arange(9), layout=layout)
    torch.testing.assert_close(cache.keys, rotated.detach())  # cached already rotated


def test_multi_head_attention_is_unchanged_by_the_rope_option():
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4)
    assert not plain.rope
    torch.manual_seed(0)
    grouped = GroupedQueryAttention(16, 4, 4)
    x = seeded_randn(1, 5, 16)
    torch.testing.assert_close(plain(x, is_causal=True)[0], grouped(x, is_causal=True)[0])


def decoder(positions, **keywords):
    torch.manual_seed(0)
    sizes = {"d_model": 16, "n_heads": 4, "n_layers": 2, "max_len": 12, "n_kv_heads": 2}
    if "kv_latent_dim" in keywords:
        del sizes["n_kv_heads"]
    return TinyDecoder(11, positions=positions, **sizes, **keywords).eval()


def tokens(length, seed=1):
    return torch.randint(0, 11, (2, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("positions", SCHEMES)
def test_greedy_decoding_with_caches_equals_recomputation_for_every_scheme(positions):
    model = decoder(positions)
    cached_tokens, cached_logits = greedy_generate(model, tokens(4), 8, use_cache=True)
    full_tokens, full_logits = greedy_generate(model, tokens(4), 8, use_cache=False)
    assert torch.equal(cached_tokens, full_tokens)
    torch.testing.assert_close(cached_logits, full_logits)


@pytest.mark.parametrize("positions", SCHEMES)
def test_a_chunk_on_top_of_a_cache_matches_the_full_forward(positions):
    model = decoder(positions)
    ids = tokens(10)
    with torch.no_grad():
        full = model(ids)  # (B, T, V)
        caches = model.new_caches()
        model(ids[:, :6], caches)
        chunk = model(ids[:, 6:], caches)  # (B, 4, V)
    torch.testing.assert_close(chunk, full[:, 6:])


def test_each_scheme_puts_positions_where_it_should():
    with trace_shapes() as trace:
        decoder("rope")(tokens(5))
    assert trace["q rotated"] == (2, 4, 5, 4) and trace["k rotated"] == (2, 2, 5, 4)
    for positions in ("sinusoidal", "alibi", "none"):
        assert decoder(positions).position_embedding is None
    weights = decoder("alibi").attention_weights(tokens(5))  # (L, B, H, T, T)
    assert weights.shape == (2, 2, 4, 5, 5) and (weights.triu(diagonal=1) == 0).all()


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "alibi", "none"])
def test_only_learned_positions_stop_at_max_len(positions):
    ids = tokens(20)  # max_len is 12
    assert decoder(positions)(ids).shape == (2, 20, 11)
    generated, _ = greedy_generate(decoder(positions), tokens(4), 16)
    assert generated.shape == (2, 20)


def test_learned_positions_past_max_len_raise():
    with raises("0 cached + 13 new positions exceed max_len = 12"):
        decoder("learned")(tokens(13))
    model, caches = decoder("learned"), decoder("learned").new_caches()
    with torch.no_grad():
        model(tokens(10), caches)
    with raises("10 cached + 3 new positions exceed max_len = 12"):
        model(tokens(3), caches)
    with raises("more than max_len = 12"):
        greedy_generate(model, tokens(4), 10)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope", "none"])
def test_latent_attention_supports_additive_positions_and_its_rotary_key(positions):
    model = decoder(positions, kv_latent_dim=6, rope_dim=4 if positions == "rope" else 0)
    cached_tokens, cached_logits = greedy_generate(model, tokens(4), 6, use_cache=True)
    full_tokens, full_logits = greedy_generate(model, tokens(4), 6, use_cache=False)
    assert torch.equal(cached_tokens, full_tokens)
    torch.testing.assert_close(cached_logits, full_logits)


def test_bad_inputs_raise_errors_naming_the_argument():
    x = torch.zeros(3, 4)
    with raises("dim: rotary features come in pairs, so dim must be even, got 5"):
        apply_rope(torch.zeros(3, 5), torch.arange(3))
    with raises("dim must be even, got 7"):
        rope_permutation(7)
    with raises("dim must be even, got 3"):
        sinusoidal_encoding(torch.arange(3), 3)
    with raises("positions: expected a tensor of shape (T,), got list"):
        apply_rope(x, [0, 1, 2])
    with raises("positions: expected shape (T,) with T = 3 as in x, got positions.shape = (1, 3)"):
        apply_rope(x, torch.arange(3)[None])
    with raises("positions: expected integer (or real) positions, got dtype torch.bool"):
        apply_rope(x, torch.ones(3, dtype=torch.bool))
    with raises("positions: expected shape (T,), got (2, 2)"):
        sinusoidal_encoding(torch.zeros(2, 2), 4)
    with raises("layout: expected one of ('adjacent', 'halves'), got 'interleaved'"):
        apply_rope(x, torch.arange(3), layout="interleaved")
    for n_heads in (0, -2, 2.0):
        with raises(f"n_heads: expected a positive int, got {n_heads!r}"):
            alibi_slopes(n_heads)
    with raises("n_heads: expected a positive int, got 0"):
        alibi_bias(0, 4)
    with raises("key_len: expected an int >= 4, got 3"):
        alibi_bias(2, 4, 3)


def test_bad_module_arguments_raise_errors_naming_the_argument():
    with raises("rope: rotary features come in pairs, so the rotated width int(head_dim * rope"):
        GroupedQueryAttention(12, 4, 2, rope=True)
    with raises("rope_layout: expected one of ('adjacent', 'halves'), got 'llama'"):
        GroupedQueryAttention(16, 4, 2, rope=True, rope_layout="llama")
    for base in (0.0, -10000.0, 1, float("inf"), "10000"):
        with raises(
            f"rope_base: expected a finite number > 1 (frequencies base^(-2i/dim) fall "
            f"from 1), got {base!r}"
        ):
            GroupedQueryAttention(16, 4, 2, rope=True, rope_base=base)
    x = torch.zeros(1, 3, 16)
    with raises("key: this layer has a rotary embedding (rope=True), which needs self-attention"):
        GroupedQueryAttention(16, 4, 2, rope=True)(x, x)
    with raises("positions: expected one of ('learned', 'sinusoidal', 'rope', 'alibi', 'none')"):
        decoder("relative")
    with raises("d_model: sinusoidal encodings come in (sin, cos) pairs, so d_model must be even"):
        TinyDecoder(11, d_model=9, n_heads=3, n_layers=1, max_len=8, positions="sinusoidal")
    with raises("positions: 'alibi' is not supported with latent attention"):
        decoder("alibi", kv_latent_dim=6)
    with raises("positions: 'rope' with latent attention means its decoupled rotary key"):
        decoder("rope", kv_latent_dim=6)
    with raises("rope: latent attention has its own decoupled rotary key"):
        make_attention(16, 4, kv_latent_dim=6, rope=True)


BAD_BASES = [
    10**400,
    -10000.0,
    0,
    0.5,
    1.0,
    float("inf"),
    float("nan"),
    "10000",
    None,
    True,
    torch.tensor(2.0),
]


@pytest.mark.parametrize("base", BAD_BASES, ids=repr)
def test_a_bad_base_is_refused_by_every_function_that_takes_one(base):
    message = "base: expected a finite number > 1 (frequencies base^(-2i/dim) fall from 1), got "
    positions = torch.arange(3)
    with raises(message + repr(base)):
        rope_angles(positions, 4, base)
    with raises(message + repr(base)):
        sinusoidal_encoding(positions, 4, base)
    with raises(message + repr(base)):
        apply_rope(torch.zeros(3, 4), positions, base)


def test_other_real_bases_work_and_differ_from_the_default():
    positions = torch.arange(5)
    default = rope_angles(positions, 8)
    for base in (2, 500.0, np.float64(10000.0), np.int64(10000)):
        angles = rope_angles(positions, 8, base)
        assert torch.isfinite(angles).all()
        assert torch.equal(angles, default) == (float(base) == 10000.0)


ANY_FLOAT = "dtype: expected a floating dtype (torch.float16, torch.bfloat16, torch.float32 or "
WIDE = "dtype: expected torch.float32 or torch.float64 (in 16 bits angles are radians off), got "


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.bool, torch.complex64, "float32", float, None]
)
def test_a_non_floating_dtype_is_refused(dtype):
    positions = torch.arange(3)
    with raises(ANY_FLOAT + f"torch.float64), got {dtype!r}"):
        sinusoidal_encoding(positions, 4, dtype=dtype)
    with raises(ANY_FLOAT + f"torch.float64), got {dtype!r}"):
        alibi_bias(2, 3, dtype=dtype)
    with raises(WIDE + repr(dtype)):
        rope_angles(positions, 4, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_angles_refuses_16_bits_but_the_encodings_compute_wider(dtype):
    positions = torch.arange(1400, 1403)
    with raises(WIDE + repr(dtype)):
        rope_angles(positions, 4, dtype=dtype)
    wide = sinusoidal_encoding(positions, 4, dtype=torch.float64)
    torch.testing.assert_close(sinusoidal_encoding(positions, 4, dtype=dtype), wide.to(dtype))
    bias = alibi_bias(2, 3, dtype=dtype)
    assert bias.dtype == dtype and bias[0, 0, 1] == float("-inf")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_positions_that_are_not_finite_are_refused(bad):
    positions = torch.tensor([0.0, 1.0, bad])
    with raises(f"positions: expected finite positions, got {bad}"):
        apply_rope(torch.zeros(3, 4), positions)
    with raises("positions: expected finite positions"):
        sinusoidal_encoding(positions, 4)
