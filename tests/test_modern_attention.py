"""Chapter 15's pieces against float64 references written from their papers.

Sliding windows (Mistral 7B; Beltagy et al.), learned sinks (gpt-oss), StreamingLLM's mask
(Xiao et al. 2023), the output gate (Qiu et al. 2025), QK-norm (Dehghani et al. 2023; OLMo 2,
Qwen3) and soft-capping (Gemma 2), each computed here independently of the library.
"""

import math

import pytest
import torch
from helpers import as_float64, raises, seeded_randn

from attnbook import (
    GroupedQueryAttention,
    MultiHeadAttention,
    RollingKVCache,
    TinyDecoder,
    add_sinks_from_lse,
    attention_with_sinks,
    causal_mask,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    latent_cache_bytes_per_token,
    scaled_dot_product_attention,
    sliding_window_mask,
    soft_cap,
    streaming_mask,
    trace_shapes,
)
from attnbook.models.gated_models import (
    build_model,
    evaluation_batch,
    fixed_gate,
    inspect,
    sink_metrics,
    training_batch,
)

# Sliding-window and streaming masks


def window_reference(query_len, window, key_len):
    offset = key_len - query_len
    return torch.tensor(
        [[i + offset - window < j <= i + offset for j in range(key_len)] for i in range(query_len)]
    )


@pytest.mark.parametrize(("T", "W", "S"), [(1, 1, 1), (5, 2, 5), (3, 4, 9), (6, 10, 6), (2, 3, 7)])
def test_sliding_window_mask_matches_the_definition(T, W, S):
    assert torch.equal(sliding_window_mask(T, W, S), window_reference(T, W, S))


def test_sliding_window_mask_edges():
    assert torch.equal(sliding_window_mask(4, 1), torch.eye(4, dtype=torch.bool))
    assert torch.equal(sliding_window_mask(4, 4), causal_mask(4))
    assert torch.equal(sliding_window_mask(4, 100), causal_mask(4))
    assert sliding_window_mask(3, 2, 8).sum(dim=1).tolist() == [2, 2, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 2), "query_len: expected a positive int, got 0"),
        ((3, 0), "window: expected a positive int, got 0"),
        ((3, 2, 0), "key_len: expected a positive int, got 0"),
        ((4, 2, 3), "key_len must be >= query_len = 4, got 3"),
        ((3, 2.0), "window: expected a positive int, got 2.0"),
    ],
)
def test_sliding_window_mask_errors(args, message):
    with raises(message):
        sliding_window_mask(*args)


def test_streaming_mask_is_window_plus_first_keys():
    T, W, S, n_sink = 4, 3, 10, 2
    mask = streaming_mask(T, W, n_sink, S)
    reference = window_reference(T, W, S)
    reference[:, :n_sink] = True  # every query here is past the sink keys
    assert torch.equal(mask, reference)
    assert torch.equal(streaming_mask(5, 2, 0), sliding_window_mask(5, 2))
    # a query never sees a sink key in its future
    assert torch.equal(streaming_mask(6, 2, 3), streaming_mask(6, 2, 3) & causal_mask(6))
    with raises("n_sink: expected an int >= 0, got -1"):
        streaming_mask(4, 2, -1)


# Learned sinks


def sinks_reference(query, key, value, sinks, mask=None):
    """Each weight exp(s_j) / (sum_k exp(s_k) + exp(sink)): the paper's extra softmax column."""
    q, k, v = (as_float64(t) for t in (query, key, value))
    sink = sinks.to(torch.float64)  # not detached: the gradient test differentiates it
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    log_denominator = torch.logaddexp(
        torch.logsumexp(scores, dim=-1), sink[:, None].expand(scores.shape[:-1])
    )  # (B, H, T)
    weights = torch.exp(scores - log_denominator[..., None])  # (B, H, T, S)
    return weights @ v, weights


def sink_inputs(seed=0):
    query = seeded_randn(2, 3, 5, 4, seed=seed)
    key = seeded_randn(2, 3, 6, 4, seed=seed + 1)
    value = seeded_randn(2, 3, 6, 4, seed=seed + 2)
    sinks = torch.tensor([-1.0, 0.5, 2.0])
    return query, key, value, sinks


def test_attention_with_sinks_matches_the_reference():
    query, key, value, sinks = sink_inputs()
    mask = causal_mask(5, 6, align="bottom-right")
    for kwargs, ref_mask in (({}, None), ({"mask": mask}, mask)):
        output, weights = attention_with_sinks(query, key, value, sinks, **kwargs)
        ref_output, ref_weights = sinks_reference(query, key, value, sinks, ref_mask)
        torch.testing.assert_close(as_float64(output), ref_output, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(as_float64(weights), ref_weights, atol=1e-6, rtol=1e-5)
        assert (weights.sum(-1) < 1).all()


def test_is_causal_is_the_top_left_causal_mask():
    query, key, value, sinks = sink_inputs()
    with_flag = attention_with_sinks(query, key, value, sinks, is_causal=True)[0]
    with_mask = attention_with_sinks(query, key, value, sinks, mask=causal_mask(5, 6))[0]
    torch.testing.assert_close(with_flag, with_mask)


def test_minus_infinity_sink_is_plain_attention_with_finite_gradients():
    query, key, value, _ = sink_inputs()
    sinks = torch.full((3,), -math.inf, requires_grad=True)
    output, weights = attention_with_sinks(query, key, value, sinks)
    plain_output, plain_weights = scaled_dot_product_attention(query, key, value)
    torch.testing.assert_close(output, plain_output)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    output.sum().backward()
    assert torch.equal(sinks.grad, torch.zeros(3))


def test_gradients_reach_the_sinks_and_match_float64():
    query, key, value, sinks = sink_inputs()
    sinks = sinks.clone().requires_grad_()
    output, _ = attention_with_sinks(query, key, value, sinks)
    (output**2).sum().backward()
    reference_sinks = as_float64(sinks).requires_grad_()
    ref_output, _ = sinks_reference(query, key, value, reference_sinks)
    (ref_output**2).sum().backward()
    assert sinks.grad.abs().min() > 0
    torch.testing.assert_close(as_float64(sinks.grad), reference_sinks.grad, atol=1e-5, rtol=1e-4)


def test_fully_masked_row_is_all_sink_without_nan():
    query, key, value, sinks = sink_inputs()
    sinks = sinks.clone().requires_grad_()
    mask = torch.ones(5, 6, dtype=torch.bool)
    mask[2] = False
    output, weights = attention_with_sinks(query, key, value, sinks, mask=mask)
    assert torch.equal(output[:, :, 2], torch.zeros(2, 3, 4))
    assert torch.equal(weights[:, :, 2], torch.zeros(2, 3, 6))
    output.sum().backward()
    assert torch.isfinite(sinks.grad).all()


def test_sinks_from_the_log_sum_exp():
    query, key, value, sinks = sink_inputs()
    output, _ = scaled_dot_product_attention(query, key, value)
    scores = query @ key.transpose(-2, -1) / 2.0  # (B, H, T, S); scale 1/sqrt(4)
    lse = torch.logsumexp(scores, dim=-1)  # (B, H, T)
    expected = attention_with_sinks(query, key, value, sinks)[0]
    torch.testing.assert_close(add_sinks_from_lse(output, lse, sinks), expected)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sinks": torch.zeros(4)}, "sinks: expected one logit per head, shape (H,) = (3,)"),
        ({"sinks": [0.0, 0.0, 0.0]}, "sinks: expected one logit per head, shape (H,) = (3,)"),
        ({"sinks": torch.zeros(3, dtype=torch.long)}, "sinks: expected a floating"),
        ({"query": torch.zeros(5, 4)}, "query: expected shape (..., H, T, d) with a head dim"),
    ],
)
def test_attention_with_sinks_errors(change, message):
    query, key, value, sinks = sink_inputs()
    arguments = {"query": query, "key": key, "value": value, "sinks": sinks, **change}
    if "query" in change:
        arguments["key"], arguments["value"] = torch.zeros(6, 4), torch.zeros(6, 4)
    with raises(message):
        attention_with_sinks(**arguments)


def test_add_sinks_from_lse_errors():
    output, sinks = torch.zeros(2, 3, 5, 4), torch.zeros(3)
    with raises("lse: expected shape (..., H, T) = (2, 3, 5)"):
        add_sinks_from_lse(output, torch.zeros(2, 3, 4), sinks)
    with raises("sinks: expected one logit per head, shape (H,) = (3,)"):
        add_sinks_from_lse(output, torch.zeros(2, 3, 5), torch.zeros(2))


def test_decoder_forward_with_a_streaming_mask():
    torch.manual_seed(0)
    model = TinyDecoder(11, d_model=16, n_heads=2, n_layers=2, max_len=8).eval()
    tokens = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(tokens)
        torch.testing.assert_close(model(tokens, mask=causal_mask(8)), full)
        windowed = model(tokens, mask=sliding_window_mask(8, 2))
        streamed = model(tokens, mask=streaming_mask(8, 2, 1))
    assert not torch.allclose(windowed, full) and not torch.allclose(streamed, windowed)
    torch.testing.assert_close(windowed[:, :2], full[:, :2])  # inside the window
    torch.testing.assert_close(streamed[:, :3], full[:, :3])  # window 2 + the first key
    with raises("mask: expected a boolean (T, S) = (8, 8) mask, got torch.float32 (8, 8)"):
        model(tokens, mask=causal_mask(8).float())
    with raises("mask: expected a boolean (T, S) = (8, 8) mask, got torch.bool (7, 7)"):
        model(tokens, mask=causal_mask(7))
    alibi = TinyDecoder(11, d_model=16, n_heads=2, n_layers=1, max_len=8, positions="alibi")
    with raises("mask: an ALiBi model builds its own mask"):
        alibi(tokens, mask=causal_mask(8))


def test_decoder_mask_with_a_cache_sees_the_cached_keys():
    torch.manual_seed(0)
    model = TinyDecoder(11, d_model=16, n_heads=2, n_layers=2, max_len=8).eval()
    tokens = torch.randint(0, 11, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole = model(tokens, mask=sliding_window_mask(8, 3))
        caches = model.new_caches()
        model(tokens[:, :5], caches, mask=sliding_window_mask(5, 3))
        with raises("mask: expected a boolean (T, S) = (3, 8) mask, got torch.bool (3, 3)"):
            model(tokens[:, 5:], caches, mask=sliding_window_mask(3, 3))
        last = model(tokens[:, 5:], caches, mask=sliding_window_mask(3, 3, 8))
    torch.testing.assert_close(last, whole[:, 5:])


# The rolling cache and the cache arithmetic


def test_rolling_cache_keeps_the_last_window_positions():
    cache = RollingKVCache(3)
    keys = torch.arange(5.0).reshape(1, 1, 5, 1)
    returned, _ = cache.append(keys[:, :, :2], keys[:, :, :2])
    assert returned.flatten().tolist() == [0, 1] and len(cache) == 2 and cache.n_cached == 2
    returned, _ = cache.append(keys[:, :, 2:], keys[:, :, 2:])
    assert returned.flatten().tolist() == [0, 1, 2, 3, 4]
    assert cache.keys.flatten().tolist() == [2, 3, 4] and len(cache) == 5
    nbytes = cache.nbytes
    cache.append(keys[:, :, :1], keys[:, :, :1])
    assert cache.nbytes == nbytes == 2 * 3 * 4 and len(cache) == 6
    with raises("window: expected a positive int, got 0"):
        RollingKVCache(0)


@pytest.mark.parametrize("rope", [False, True])
def test_rolling_decoding_equals_one_windowed_pass(rope):
    torch.manual_seed(0)
    layer = GroupedQueryAttention(16, 4, 2, window=3, rope=rope).eval()
    x = seeded_randn(2, 9, 16)
    full, _ = layer(x, is_causal=True)
    reference = GroupedQueryAttention(16, 4, 2, rope=rope).eval()
    reference.load_state_dict(layer.state_dict())
    masked, _ = reference(x, mask=sliding_window_mask(9, 3))
    torch.testing.assert_close(full, masked)
    cache = layer.new_cache()
    assert isinstance(cache, RollingKVCache)
    chunks = [layer(x[:, :4], is_causal=True, cache=cache)[0]]
    chunks += [layer(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-6, rtol=1e-5)
    assert cache.n_cached == 3 and len(cache) == 9


def test_window_layer_errors():
    layer = GroupedQueryAttention(16, 4, 2, window=3)
    x = seeded_randn(1, 4, 16)
    with raises("is_causal: this layer has a sliding window (window = 3)"):
        layer(x)
    with raises("cache: a RollingKVCache of window 2 holds too few positions"):
        layer(x, is_causal=True, cache=RollingKVCache(2))


def test_kv_cache_bytes_mixes_local_and_global_layers():
    per_layer_position = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, bf16
    assert kv_cache_bytes(1000, n_layers=4, n_kv_heads=8, head_dim=128) == (
        kv_cache_bytes_per_token(4, 8, 128) * 1000
    )
    mixed = kv_cache_bytes(
        1000, n_layers=6, n_kv_heads=8, head_dim=128, n_local_layers=5, window=100
    )
    assert mixed == per_layer_position * (1 * 1000 + 5 * 100)
    short = kv_cache_bytes(50, n_layers=6, n_kv_heads=8, head_dim=128, n_local_layers=5, window=100)
    assert short == per_layer_position * 6 * 50
    with raises("window: 5 sliding-window layers need a window, got None"):
        kv_cache_bytes(10, n_layers=6, n_kv_heads=1, head_dim=8, n_local_layers=5)
    with raises("n_local_layers: expected an int in [0, 6], got 7"):
        kv_cache_bytes(10, n_layers=6, n_kv_heads=1, head_dim=8, n_local_layers=7, window=4)


def test_latent_cache_bytes_per_token():
    assert latent_cache_bytes_per_token(61, 512, 64) == 61 * 576 * 2
    assert latent_cache_bytes_per_token(2, 8, 0, torch.float32) == 2 * 8 * 4
    with raises("rope_dim: expected an int >= 0, got -1"):
        latent_cache_bytes_per_token(2, 8, -1)


# The options of the attention module, against a float64 reference


def rms_norm(x, weight, eps=1e-6):
    return x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps) * weight


def options_reference(layer, x, *, window=None, gate=False, qk_norm=False, cap=None, sinks=False):
    """One causal forward pass written from the papers, in float64, from the layer's weights."""
    weight = {name: as_float64(p) for name, p in layer.state_dict().items()}
    x = as_float64(x)
    B, T, _ = x.shape
    H, H_kv, d = layer.n_heads, layer.n_kv_heads, layer.head_dim

    def project(name, heads):
        y = x @ weight[f"{name}.weight"].T + weight[f"{name}.bias"]
        return y.view(B, T, heads, d).transpose(1, 2)

    q, k, v = project("q_proj", H), project("k_proj", H_kv), project("v_proj", H_kv)
    if qk_norm:
        q, k = rms_norm(q, weight["q_norm.weight"]), rms_norm(k, weight["k_norm.weight"])
    k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j <= i) & (j > i - (window or T))
    scores = scores.masked_fill(~allowed, -math.inf)
    if sinks:
        sink = weight["sinks"][:, None, None].expand(B, H, T, 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(scores, dim=-1)
    heads = weights @ v
    if gate:
        heads = heads * torch.sigmoid(project("gate_proj", H))
    merged = heads.transpose(1, 2).reshape(B, T, H * d)
    return merged @ weight["out_proj.weight"].T + weight["out_proj.bias"], weights


OPTIONS = [
    {"window": 3},
    {"output_gate": True},
    {"qk_norm": True},
    {"logit_softcap": 2.0},
    {"sinks": True},
    {"window": 2, "output_gate": True, "qk_norm": True, "logit_softcap": 5.0},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_options_match_the_float64_reference(options):
    torch.manual_seed(0)
    layer = GroupedQueryAttention(16, 4, 2, **options).eval()
    with torch.no_grad():  # non-trivial norm scales and sinks, so a mix-up would show
        for name in ("q_norm", "k_norm"):
            if getattr(layer, name) is not None:
                getattr(layer, name).weight.uniform_(0.5, 1.5)
        if layer.sinks is not None:
            layer.sinks.copy_(torch.tensor([-1.0, 0.0, 1.0, 2.0]))
    x = seeded_randn(2, 6, 16) * 3
    reference, ref_weights = options_reference(
        layer,
        x,
        window=options.get("window"),
        gate=options.get("output_gate", False),
        qk_norm=options.get("qk_norm", False),
        cap=options.get("logit_softcap"),
        sinks=options.get("sinks", False),
    )
    for need_weights in (False, True):
        output, weights = layer(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(as_float64(output), reference, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(as_float64(weights), ref_weights, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("options", OPTIONS)
def test_options_get_gradients_without_nan(options):
    torch.manual_seed(0)
    layer = GroupedQueryAttention(16, 4, 2, **options)
    x = (seeded_randn(2, 6, 16) * 30).requires_grad_()
    output, _ = layer(x, is_causal=True)
    output.sum().backward()
    for name, parameter in layer.named_parameters():
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name
    assert torch.isfinite(x.grad).all()


def test_options_are_off_by_default():
    layer = GroupedQueryAttention(16, 4, 2)
    assert layer.window is None and layer.gate_proj is None and layer.q_norm is None
    assert layer.sinks is None and layer.logit_softcap is None
    names = {name for name, _ in layer.named_parameters()}
    assert names == {f"{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")}


def test_soft_capping_bounds_the_scores():
    scores = torch.tensor([-1e4, -3.0, 0.0, 0.01, 3.0, 1e4])
    capped = soft_cap(scores, 5.0)
    assert capped.abs().max() <= 5.0 and capped[2] == 0
    torch.testing.assert_close(capped[3], torch.tensor(0.01), atol=1e-8, rtol=1e-5)
    query, key, value = (
        seeded_randn(1, 3, 4) * 50,
        seeded_randn(1, 3, 4, seed=2),
        torch.eye(3, 4)[None],
    )
    _, weights = scaled_dot_product_attention(query, key, value, logit_softcap=1.0)
    assert weights.max() < math.e**2 / (math.e**2 + 2) + 1e-6  # scores in (-1, 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"window": 0}, "window: expected a positive int, got 0"),
        ({"output_gate": 1}, "output_gate: expected True or False, got 1"),
        (
            {"qk_norm": "yes"},
            "qk_norm: expected one of (False, True, 'head', 'projection'), got 'yes'",
        ),
        ({"sinks": None}, "sinks: expected True or False, got None"),
        ({"logit_softcap": 0.0}, "logit_softcap: expected a finite number > 0, got 0.0"),
        ({"logit_softcap": -30.0}, "logit_softcap: expected a finite number > 0, got -30.0"),
        ({"sinks": True, "logit_softcap": 5.0}, "logit_softcap: not supported together with"),
        ({"sinks": True, "dropout": 0.1}, "dropout: not supported together with sinks=True"),
    ],
)
def test_option_errors(options, message):
    with raises(message):
        GroupedQueryAttention(16, 4, 2, **options)


def test_soft_cap_errors():
    with raises("cap: expected a finite number > 0, got 0"):
        soft_cap(torch.zeros(2), 0)
    query = seeded_randn(1, 3, 4)
    with raises("logit_softcap: expected a finite number > 0, got inf"):
        scaled_dot_product_attention(query, query, query, logit_softcap=math.inf)


# The sink experiment's model


def test_training_batch_and_evaluation_batch():
    tokens = training_batch(8, torch.Generator().manual_seed(0))
    assert tokens.shape == (8, 33) and (tokens[:, 0] == 64).all() and tokens[:, 1:].max() < 64
    for row in tokens[:, 1:]:
        periods = [p for p in range(4, 25) if torch.equal(row[p:], row[:-p])]
        assert periods, row
    evaluation = evaluation_batch(4)
    assert torch.equal(evaluation[:, 1:17], evaluation[:, 17:])


def test_gated_model_is_chapter_14s_decoder_with_a_gate():
    plain, gated = build_model(output_gate=False), build_model(output_gate=True)
    assert isinstance(gated, TinyDecoder) and all(b.mlp is None for b in gated.blocks)
    assert all(block.attention.gate_proj is not None for block in gated.blocks)
    assert all(block.attention.gate_proj is None for block in plain.blocks)
    extra = sum(p.numel() for p in gated.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == 2 * (64 * 64 + 64)  # one D x D gate projection (and bias) per layer


def test_fixed_gate_is_a_constant_gate_and_is_removed_afterwards():
    torch.manual_seed(0)
    layer = GroupedQueryAttention(16, 4, 2, output_gate=True).eval()
    x = torch.randn(2, 5, 16)  # (B, T, D)
    value = torch.rand(16)
    value[0], value[1] = 0.0, 1.0  # the ends of the interval, logit -inf and +inf
    constant = GroupedQueryAttention(16, 4, 2, output_gate=True).eval()
    constant.load_state_dict(layer.state_dict())
    with torch.no_grad():  # the same gate from weights 0 and a bias of logit(value)
        constant.gate_proj.weight.zero_()
        constant.gate_proj.bias.copy_(torch.logit(value.double()).float())
        live, _ = layer(x, is_causal=True)
        with fixed_gate(layer, value):
            fixed, _ = layer(x, is_causal=True)
        expected, _ = constant(x, is_causal=True)
        after, _ = layer(x, is_causal=True)
    torch.testing.assert_close(fixed, expected)
    assert not torch.allclose(fixed, live) and torch.equal(after, live)


def test_fixed_gate_errors():
    gated = GroupedQueryAttention(16, 4, 2, output_gate=True)
    cases = [
        (GroupedQueryAttention(16, 4, 2), torch.rand(16), "layer: expected an attention"),
        (gated, torch.rand(2, 8), "value: expected shape (H * d_head,) (1 dims)"),
        (gated, torch.rand(8), "value: expected one gate per feature, 16, got 8"),
        (gated, torch.full((16,), 1.5), "value: expected gates in [0, 1]"),
    ]
    for layer, value, message in cases:
        with raises(message), fixed_gate(layer, value):
            pass


def test_inspect_and_metrics():
    torch.manual_seed(0)
    model = build_model(output_gate=True).eval()
    tokens = evaluation_batch(4)
    seen = inspect(model, tokens)
    assert seen["weights"].shape == (2, 4, 4, 33, 33)
    torch.testing.assert_close(seen["weights"], model.attention_weights(tokens))
    torch.testing.assert_close(seen["weights"].sum(-1), torch.ones(2, 4, 4, 33))
    assert len(seen["largest_activation"]) == 3 and len(seen["largest_score"]) == 2
    # the hooks read the input of layer 0's attention: the embedding after its LayerNorm
    block = model.blocks[0]
    with torch.no_grad():
        embedded = model.token_embedding(tokens) + model.position_embedding.weight
        torch.testing.assert_close(seen["attention_inputs"][0], block.attention_norm(embedded))
        q = block.attention.q_proj(seen["attention_inputs"][0])[0, :, :16]  # (T, d_head)
        k = block.attention.k_proj(seen["attention_inputs"][0])[0, :, :16]  # (T, d_head)
    head_0 = ((q @ k.T) / 4).masked_fill(~causal_mask(33), -math.inf).softmax(-1)
    torch.testing.assert_close(head_0, seen["weights"][0, 0, 0])
    assert seen["largest_activation"][0] == embedded.abs().max().item()
    # the hooks are removed afterwards
    assert not any(b.attention._forward_pre_hooks for b in model.blocks)
    metrics = sink_metrics(model, tokens)
    assert 0 < metrics["sink_first_copy"] < 1 and metrics["second_copy_loss"] > math.log(64) - 1


def test_shipped_gated_models_load_and_match_their_manifest():
    from attnbook.models.gated_models import load_gated_models

    shipped = load_gated_models()
    evaluation = evaluation_batch()
    for name, model in (("plain", shipped.plain), ("gated", shipped.gated)):
        metrics = sink_metrics(model, evaluation)
        curves = shipped.manifest["curves"][name]
        for key, value in metrics.items():
            assert value == pytest.approx(curves[key][-1], abs=1e-4), (name, key)
    assert shipped.gated.blocks[0].attention.gate_proj is not None
    assert shipped.plain.blocks[0].attention.gate_proj is None


def test_the_plain_gated_experiment_model_is_chapter_14s_random_run():
    from attnbook.analysis.circuits import load_circuit_models
    from attnbook.models.gated_models import load_gated_models

    plain = load_gated_models().plain.state_dict()
    snapshot = load_circuit_models()[0]["random/600"].state_dict()  # stored in float16
    assert plain.keys() == snapshot.keys()
    for name, value in plain.items():
        torch.testing.assert_close(value.half().float(), snapshot[name], rtol=0, atol=0)


def test_load_gated_models_refuses_changed_weights(monkeypatch):
    from attnbook.models import gated_models

    real = gated_models.read_shipped

    def tampered(name, regenerate):
        data = real(name, regenerate)
        return data + b"x" if name == gated_models.WEIGHTS else data

    monkeypatch.setattr(gated_models, "read_shipped", tampered)
    with raises("differs from the manifest's"):
        gated_models.load_gated_models()


def test_multi_head_attention_passes_the_options_on():
    torch.manual_seed(0)
    options = {"window": 3, "output_gate": True, "qk_norm": True, "logit_softcap": 5.0}
    layer = MultiHeadAttention(16, 4, **options).eval()
    assert layer.n_kv_heads == 4 and layer.window == 3 and layer.gate_proj is not None
    x = seeded_randn(2, 6, 16) * 3
    reference, _ = options_reference(layer, x, window=3, gate=True, qk_norm=True, cap=5.0)
    output, _ = layer(x, is_causal=True)
    torch.testing.assert_close(as_float64(output), reference, atol=2e-5, rtol=1e-5)
    assert MultiHeadAttention(16, 4, sinks=True).sinks.shape == (4,)


def test_trace_names_every_key_tensor_with_the_key_axis():
    layer = GroupedQueryAttention(16, 4, 2, rope=True, qk_norm=True, window=3, sinks=True)
    with torch.no_grad(), trace_shapes() as trace:
        layer(seeded_randn(1, 5, 16), is_causal=True)
    key_rows = {row.step: row.dims for row in trace.rows if row.step.startswith(("k", "v"))}
    assert set(key_rows) == {"k", "v", "k normed", "k rotated"}
    assert set(key_rows.values()) == {"(B, H_kv, S, d_head)"}
