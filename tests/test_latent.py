"""Multi-head latent attention, its latent cache, rotary embeddings and the absorbed form."""

import math

import pytest
import torch
from helpers import (
    DEVICES,
    TOLERANCES,
    as_float64,
    linear_float64,
    raises,
    reference_attention,
    seeded_randn,
)

from attnbook import (
    LatentCache,
    MultiHeadLatentAttention,
    apply_rope,
    causal_mask,
    trace_shapes,
)

D_MODEL, N_HEADS, LATENT, Q_LATENT = 32, 4, 12, 10
FLOAT32 = TOLERANCES[torch.float32]
DEEPSEEK_EPS = 1e-6  # rms_norm_eps of DeepSeek-V2's released configuration
# DeepSeek-V2's two extra parts: compressed queries, normalised KV latent, and both together.
SHIPPED_OPTIONS = [
    {"q_latent_dim": Q_LATENT},
    {"latent_norm": True},
    {"q_latent_dim": Q_LATENT, "latent_norm": True},
]
ALL_OPTIONS = [{}, *SHIPPED_OPTIONS]


def layer(rope_dim=0, *, bias=False, device="cpu", dtype=torch.float32, **options):
    """A seeded layer; its RMSNorm weights are perturbed away from ones, so a missing weight
    multiplication shows."""
    torch.manual_seed(0)
    attention = MultiHeadLatentAttention(
        D_MODEL, N_HEADS, LATENT, rope_dim=rope_dim, bias=bias, **options
    )
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for norm in (attention.q_norm, attention.kv_norm):
            if norm is not None:
                norm.weight.add_(0.5 * torch.randn(norm.weight.shape, generator=generator))
    return attention.to(device=device, dtype=dtype).eval()


def rms_norm_reference(norm, x):
    """RMSNorm in float64 by hand, with DeepSeek's eps: x / sqrt(mean(x^2) + eps) * weight."""
    x = as_float64(x)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + DEEPSEEK_EPS) * as_float64(norm.weight)


def rope_reference(x, positions, base=10000.0):
    """RoPE in float64 with complex numbers: pair (2i, 2i + 1) times e^(i t base^(-2i/dim))."""
    half = x.size(-1) // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.size(-1))  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * theta  # (T, dim/2)
    pairs = torch.view_as_complex(x.unflatten(-1, (half, 2)).contiguous())  # (..., T, dim/2)
    rotated = pairs * torch.polar(torch.ones_like(angles), angles)  # (..., T, dim/2)
    return torch.view_as_real(rotated).flatten(-2)  # (..., T, dim)


def mla_reference(attention, x, mask=None):
    """DeepSeek-V2's MLA equations in float64 from the layer's weights: (output, weights).

    c_kv = W_DKV h, RMS-normalised with ``latent_norm``; k_C = W_UK c_kv; v_C = W_UV c_kv.
    Queries read q_in = h, or with ``q_latent_dim`` the compressed c_Q = RMSNorm(W_DQ h):
    q_C = W_Q q_in (W_UQ c_Q); q_R = RoPE(W_QR q_in), one per head, and k_R = RoPE(W_KR h), one
    per token shared by the heads and never normalised; scores [q_C; q_R] . [k_C; k_R] /
    sqrt(d_h + d_R); o_h = softmax(scores) v_C; u = W_O [o_1; ...; o_H].
    """
    batch, length, _ = x.shape
    n_heads, rope_dim = attention.n_heads, attention.rope_dim

    def per_head(t):
        return t.view(batch, length, n_heads, -1).transpose(1, 2)  # (B, H, T, d)

    c_kv = linear_float64(attention.kv_down, x)  # (B, T, d_c)
    if attention.kv_norm is not None:
        c_kv = rms_norm_reference(attention.kv_norm, c_kv)  # (B, T, d_c)
    q_in = as_float64(x)  # (B, T, D)
    if attention.q_down is not None:
        q_in = rms_norm_reference(attention.q_norm, linear_float64(attention.q_down, x))  # c_Q
    k = per_head(linear_float64(attention.k_up, c_kv))  # (B, H, T, d_h)
    v = per_head(linear_float64(attention.v_up, c_kv))  # (B, H, T, d_h)
    q = per_head(linear_float64(attention.q_proj, q_in))  # (B, H, T, d_h)
    if rope_dim:
        positions = torch.arange(length)
        q_rope = rope_reference(per_head(linear_float64(attention.q_rope_proj, q_in)), positions)
        k_rope = rope_reference(linear_float64(attention.k_rope_proj, x), positions)  # (B, T, d_R)
        q = torch.cat([q, q_rope], dim=-1)  # (B, H, T, d_h + d_R)
        k = torch.cat([k, k_rope[:, None].expand(-1, n_heads, -1, -1)], dim=-1)  # (B, H, T, ..)
    scale = 1.0 / math.sqrt(attention.head_dim + rope_dim)
    heads, weights = reference_attention(q, k, v, mask, scale=scale)  # (B, H, T, d_h), (.., T)
    merged = heads.transpose(1, 2).reshape(batch, length, -1)  # (B, T, D)
    return linear_float64(attention.out_proj, merged), weights


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rope_dim", [0, 4])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_cached_decoding_equals_the_uncached_forward(device, rope_dim, need_weights, options):
    attention = layer(rope_dim, device=device, **options)
    x = seeded_randn(2, 9, D_MODEL, device=device)  # (B, T, D)
    with torch.no_grad():
        full, _ = attention(x, is_causal=True)
        cache = attention.new_cache()
        pieces = []
        for start, stop in ((0, 5), (5, 6), (6, 9)):  # prefill, one token, a 3-token chunk
            out, weights = attention(
                x[:, start:stop], is_causal=True, cache=cache, need_weights=need_weights
            )
            pieces.append(out)
            if need_weights:
                assert weights.shape == (2, N_HEADS, stop - start, stop)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, **FLOAT32)
    assert len(cache) == 9


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rope_dim", [0, 4])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_every_path_matches_the_deepseek_v2_equations_in_float64(device, rope_dim, bias, options):
    attention = layer(rope_dim, bias=bias, device=device, **options)
    x = seeded_randn(2, 6, D_MODEL, device=device)  # (B, T, D)
    lower = torch.ones(6, 6, dtype=torch.bool).tril()  # (T, S): causal, written out
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]  # (B,1,1,S)
    additive = torch.zeros(6, 6).masked_fill(~lower, float("-inf"))  # (T, S)
    cases = [
        ({}, None),
        ({"is_causal": True}, lower),
        ({"mask": padding.to(device)}, padding),
        ({"mask": additive.to(device)}, lower),
    ]
    for kwargs, mask in cases:
        expected, expected_weights = mla_reference(attention, x, mask)
        fused, none = attention(x, **kwargs)
        explicit, weights = attention(x, need_weights=True, **kwargs)
        absorbed, absorbed_weights = attention.absorbed_forward(x, **kwargs)
        assert none is None
        for output in (fused, explicit, absorbed):
            torch.testing.assert_close(as_float64(output), expected, **FLOAT32)
        for found in (weights, absorbed_weights):
            torch.testing.assert_close(as_float64(found), expected_weights, **FLOAT32)


@pytest.mark.parametrize("rope_dim", [0, 4])
def test_causality_later_tokens_never_change_earlier_outputs(rope_dim):
    attention = layer(rope_dim)
    x = seeded_randn(1, 7, D_MODEL)
    changed = x.clone()
    changed[:, 4:] = seeded_randn(1, 3, D_MODEL, seed=9)
    before, _ = attention(x, is_causal=True)
    after, _ = attention(changed, is_causal=True)
    torch.testing.assert_close(before[:, :4], after[:, :4])
    assert not torch.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.parametrize("rope_dim", [0, 4])
@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_absorbed_forward_with_a_cache_equals_the_uncached_forward(rope_dim, options):
    attention = layer(rope_dim, **options)
    x = seeded_randn(2, 7, D_MODEL)
    full, _ = attention(x, is_causal=True)
    cache = attention.new_cache()
    first, _ = attention.absorbed_forward(x[:, :4], is_causal=True, cache=cache)
    second, weights = attention.absorbed_forward(x[:, 4:], is_causal=True, cache=cache)
    torch.testing.assert_close(torch.cat([first, second], 1), full, **FLOAT32)
    assert weights.shape == (2, N_HEADS, 3, 7)


@pytest.mark.parametrize("rope_dim", [0, 4])
@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_cache_holds_latents_and_rope_keys_and_counts_bytes(rope_dim, options):
    attention = layer(rope_dim, **options)
    cache = attention.new_cache()
    assert isinstance(cache, LatentCache) and len(cache) == 0 and cache.nbytes == 0
    with torch.no_grad():
        attention(seeded_randn(3, 5, D_MODEL), is_causal=True, cache=cache)
        attention(seeded_randn(3, 2, D_MODEL), is_causal=True, cache=cache)
    assert len(cache) == 7 and cache.latents.shape == (3, 7, LATENT)
    assert (cache.rope_keys is None) == (rope_dim == 0)
    assert cache.nbytes == (LATENT + rope_dim) * 4 * 3 * 7
    assert "positions=7" in repr(cache)


@pytest.mark.parametrize("rope_dim", [0, 4])
def test_query_compression_leaves_the_cache_size_alone_and_the_norm_fills_it(rope_dim):
    x = seeded_randn(2, 5, D_MODEL)  # (B, T, D)
    caches = {}
    for name, options in (("plain", {}), ("shipped", SHIPPED_OPTIONS[-1])):
        attention = layer(rope_dim, **options)
        caches[name] = attention.new_cache()
        with torch.no_grad():
            attention(x, is_causal=True, cache=caches[name])
    plain, shipped = caches["plain"], caches["shipped"]
    assert shipped.nbytes == plain.nbytes == (LATENT + rope_dim) * 4 * 2 * 5
    assert shipped.latents.shape == plain.latents.shape
    # The cache holds the normalised latents: each one's RMS over d_c, before the weight, is 1.
    kv_norm = layer(rope_dim, **SHIPPED_OPTIONS[-1]).kv_norm
    unweighted = shipped.latents / kv_norm.weight  # (B, S, d_c)
    rms = unweighted.pow(2).mean(-1).sqrt()  # (B, S)
    torch.testing.assert_close(rms, torch.ones(2, 5), atol=1e-4, rtol=0)
    assert not torch.allclose(plain.latents.pow(2).mean(-1).sqrt(), torch.ones(2, 5), atol=0.1)


def parameter_count(rope_dim, bias, q_latent_dim=0, latent_norm=False):
    """MLA's parameters written out, one term per weight matrix, bias and RMSNorm weight."""
    d, h, c = D_MODEL, N_HEADS, LATENT
    query_width = q_latent_dim or d
    count = query_width * d + d * c + 2 * c * d + d * d  # W_Q or W_UQ, W_DKV, W_UK, W_UV, W_O
    count += query_width * h * rope_dim + d * rope_dim  # W_QR, W_KR
    if q_latent_dim:
        count += d * q_latent_dim + q_latent_dim  # W_DQ and its RMSNorm weight
    if latent_norm:
        count += c  # the latent's RMSNorm weight
    if bias:
        count += d + c + d + h * rope_dim + rope_dim + q_latent_dim  # q, kv_down, out, rope, W_DQ
    return count


@pytest.mark.parametrize("rope_dim", [0, 4])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_parameter_count_formula(rope_dim, bias, options):
    attention = layer(rope_dim, bias=bias, **options)
    found = sum(p.numel() for p in attention.parameters())
    assert found == parameter_count(rope_dim, bias, **options)


def test_options_off_keep_the_checkpoint_layout():
    names = set(layer(4, bias=True).state_dict())
    assert not any(name.split(".")[0] in ("q_down", "q_norm", "kv_norm") for name in names)
    shipped = set(layer(4, bias=True, **SHIPPED_OPTIONS[-1]).state_dict())
    extra = {"q_down.weight", "q_down.bias", "q_norm.weight", "kv_norm.weight"}
    assert shipped == names | extra


def test_absorbed_query_weight_reads_the_compressed_query():
    attention = layer(4, bias=True, q_latent_dim=Q_LATENT, latent_norm=True)
    w_q_absorbed, b_q_absorbed, w_o_absorbed = attention.absorbed_weights()
    assert w_q_absorbed.shape == (N_HEADS, LATENT, Q_LATENT)
    assert b_q_absorbed.shape == (N_HEADS, LATENT)
    assert w_o_absorbed.shape == (N_HEADS, D_MODEL, LATENT)
    assert attention.q_norm.eps == attention.kv_norm.eps == DEEPSEEK_EPS


def test_cache_in_float64_counts_eight_bytes_a_number():
    attention = layer(4, dtype=torch.float64)
    cache = attention.new_cache()
    attention(seeded_randn(2, 3, D_MODEL).double(), cache=cache)
    assert cache.nbytes == (LATENT + 4) * 8 * 2 * 3


def test_rope_rotates_pairs_and_depends_on_relative_position():
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0]])  # (T=1, dim=4)
    rotated = apply_rope(x, torch.tensor([1]))
    expected = torch.tensor(
        [
            [
                torch.cos(torch.tensor(1.0)),
                torch.sin(torch.tensor(1.0)),
                torch.cos(torch.tensor(0.01)),
                torch.sin(torch.tensor(0.01)),
            ]
        ]
    )
    torch.testing.assert_close(rotated, expected)
    q, k = seeded_randn(1, 8), seeded_randn(1, 8, seed=2)
    at_3_1 = apply_rope(q, torch.tensor([3])) @ apply_rope(k, torch.tensor([1])).T
    at_9_7 = apply_rope(q, torch.tensor([9])) @ apply_rope(k, torch.tensor([7])).T
    torch.testing.assert_close(at_3_1, at_9_7)
    torch.testing.assert_close(apply_rope(q, torch.tensor([5])).norm(), q.norm())


def test_shape_trace_of_forward_and_absorbed_forward():
    attention = layer(4)
    cache = attention.new_cache()
    with trace_shapes() as trace:
        attention(seeded_randn(2, 3, D_MODEL), is_causal=True, cache=cache, need_weights=True)
    assert trace["c_kv"] == (2, 3, LATENT)
    assert trace["k rope"] == (2, 3, 4) and trace["q rope"] == (2, N_HEADS, 3, 4)
    assert trace["k"] == trace["v"] == (2, N_HEADS, 3, D_MODEL // N_HEADS)
    assert trace["q full"] == (2, N_HEADS, 3, D_MODEL // N_HEADS + 4)
    assert trace["weights"] == (2, N_HEADS, 3, 3) and trace["output"] == (2, 3, D_MODEL)
    with trace_shapes() as trace:
        attention.absorbed_forward(seeded_randn(2, 1, D_MODEL), cache=cache)
    assert trace["q latent"] == (2, N_HEADS, 1, LATENT) and trace["scores"] == (2, N_HEADS, 1, 4)
    assert "c_q" not in trace.steps


@pytest.mark.parametrize("method", ["forward", "absorbed_forward"])
def test_shape_trace_records_the_compressed_query_and_normalised_latent(method):
    attention = layer(4, q_latent_dim=Q_LATENT, latent_norm=True)
    with trace_shapes() as trace:
        getattr(attention, method)(seeded_randn(2, 3, D_MODEL), is_causal=True)
    assert trace["c_q"] == (2, 3, Q_LATENT)
    assert trace["c_kv"] == (2, 3, LATENT) and trace["q rope"] == (2, N_HEADS, 3, 4)
    assert "normalised" in next(row.meaning for row in trace.rows if row.step == "c_kv")


@pytest.mark.parametrize("rope_dim", [0, 2])
@pytest.mark.parametrize("options", [{}, {"q_latent_dim": 3, "latent_norm": True}])
def test_gradcheck_float64(rope_dim, options):
    torch.manual_seed(0)
    attention = MultiHeadLatentAttention(4, 2, 3, rope_dim=rope_dim, bias=True, **options)
    attention = attention.double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda inp: attention(inp, is_causal=True, need_weights=True)[0], (x,)
    )
    assert torch.autograd.gradcheck(lambda inp: attention(inp, is_causal=True)[0], (x,))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 30}, "d_model: 30 is not divisible by n_heads = 4"),
        ({"n_heads": 0}, "n_heads: expected a positive int, got 0"),
        ({"kv_latent_dim": 0}, "kv_latent_dim: expected a positive int, got 0"),
        ({"rope_dim": 3}, "rope_dim must be even, got 3"),
        ({"rope_dim": -2}, "rope_dim: expected an int >= 0, got -2"),
        ({"dropout": 1.0}, "dropout: expected a probability in [0, 1), got 1.0"),
        ({"q_latent_dim": -1}, "q_latent_dim: expected an int >= 0, got -1"),
        ({"q_latent_dim": 2.5}, "q_latent_dim: expected an int >= 0, got 2.5"),
        ({"q_latent_dim": True}, "q_latent_dim: expected an int >= 0, got True"),
        ({"latent_norm": 1}, "latent_norm: expected True or False, got 1"),
        ({"latent_norm": "yes"}, "latent_norm: expected True or False, got 'yes'"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    arguments = {"d_model": D_MODEL, "n_heads": N_HEADS, "kv_latent_dim": LATENT, **kwargs}
    keywords = {
        name: arguments.pop(name)
        for name in ("rope_dim", "dropout", "q_latent_dim", "latent_norm")
        if name in arguments
    }
    with raises(message):
        MultiHeadLatentAttention(**arguments, **keywords)


@pytest.mark.parametrize("method", ["forward", "absorbed_forward"])
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: a(torch.zeros(2, D_MODEL)), "x: expected shape (B, T, D) (3 dims)"),
        (lambda a: a(torch.zeros(2, 3, 8)), "with D = d_model = 32, got x.shape = (2, 3, 8)"),
        (lambda a: a("x"), "x: expected a tensor of shape (B, T, D), got str"),
        (
            lambda a: a(torch.zeros(2, 3, D_MODEL), mask=causal_mask(3), is_causal=True),
            "mask: got both a mask and is_causal=True",
        ),
        (
            lambda a: a(torch.zeros(2, 3, D_MODEL), mask=torch.ones(3, 4, dtype=torch.bool)),
            "does not broadcast to the scores' shape (2, 4, 3, 3)",
        ),
        (
            lambda a: a(torch.zeros(2, 3, D_MODEL), mask=torch.ones(3, 3, dtype=torch.long)),
            "mask: expected dtype torch.bool",
        ),
        (
            lambda a: a(torch.zeros(2, 3, D_MODEL), cache=[]),
            "cache: expected an attnbook.LatentCache or None",
        ),
    ],
)
def test_bad_forward_arguments(method, call, message):
    attention = layer(4)
    with raises(message):
        call(getattr(attention, method))


def test_mask_must_cover_the_cached_positions():
    attention = layer()
    cache = attention.new_cache()
    attention(seeded_randn(1, 4, D_MODEL), cache=cache)
    with raises("scores' shape (1, 4, 1, 5)"):
        attention(seeded_randn(1, 1, D_MODEL), mask=torch.ones(1, 4, dtype=torch.bool), cache=cache)
    assert len(cache) == 4


@pytest.mark.parametrize(
    ("latents", "rope_keys", "message"),
    [
        (torch.zeros(2, 1, 6), torch.zeros(2, 1, 4), "with B, kv_latent_dim = 2, 5 as in"),
        (torch.zeros(3, 1, 5), torch.zeros(3, 1, 4), "with B, kv_latent_dim = 2, 5 as in"),
        (torch.zeros(2, 1, 5), torch.zeros(2, 1, 2), "expected rope_dim = 4 as in the cache"),
        (torch.zeros(2, 1, 5), None, "the cache holds rotary keys"),
        (torch.zeros(2, 1, 5), torch.zeros(2, 2, 4), "with B, T = 2, 1 as in latents"),
        (torch.zeros(2, 1, 5, dtype=torch.float64), torch.zeros(2, 1, 4), "rope_keys: dtype"),
        (torch.zeros(2, 5), None, "latents: expected shape (B, T, kv_latent_dim) (3 dims)"),
    ],
)
def test_bad_cache_appends_raise_and_leave_the_cache_alone(latents, rope_keys, message):
    cache = LatentCache()
    cache.append(torch.zeros(2, 3, 5), torch.zeros(2, 3, 4))
    with raises(message):
        cache.append(latents, rope_keys)
    assert len(cache) == 3 and cache.rope_keys.shape == (2, 3, 4)


def test_cache_without_rope_refuses_rope_keys_and_other_dtypes():
    cache = LatentCache()
    cache.append(torch.zeros(1, 2, 5))
    with raises("the cache holds no rotary keys"):
        cache.append(torch.zeros(1, 1, 5), torch.zeros(1, 1, 2))
    with raises("latents: dtype torch.float64 does not match the cache's"):
        cache.append(torch.zeros(1, 1, 5, dtype=torch.float64))


def test_apply_rope_errors():
    with raises("dim must be even, got 3"):
        apply_rope(torch.zeros(2, 3), torch.arange(2))
    with raises("positions: expected shape (T,) with T = 2"):
        apply_rope(torch.zeros(2, 4), torch.arange(3))
