"""Real models' attention layers: the layer's options and the config loader, against float64
references written here from the models' papers and code (transformers' modeling files, read,
not imported), never from the library's own module."""

import math

import pytest
import torch
from helpers import raises
from test_rope_scaling import llama3_reference, plain, yarn_reference

from attnbook.core.kv_cache import KVCache
from attnbook.layers.model_configs import (
    SHIPPED_CONFIGS,
    attention_layer_from_config,
    layer_types,
    position_settings,
    shipped_model_config,
)
from attnbook.layers.multihead import GroupedQueryAttention, MultiHeadAttention

B, T = 2, 7


def frequencies(dim, base, scaling, seq_len):
    """RoPE frequencies and the cos/sin factor, from the formulas (see test_rope_scaling)."""
    if scaling is None:
        return plain(dim, base), 1.0
    kind, factor = scaling["rope_type"], scaling["factor"]
    if kind == "linear":
        return [f / factor for f in plain(dim, base)], 1.0
    if kind == "dynamic":
        original = scaling["original_max_position_embeddings"]
        grown = base * (factor * max(seq_len, original) / original - factor + 1) ** (
            dim / (dim - 2)
        )
        return plain(dim, grown), 1.0
    if kind == "llama3":
        keys = ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        return llama3_reference(dim, base, factor, *(scaling[k] for k in keys)), 1.0
    original = scaling["original_max_position_embeddings"]
    truncate = scaling.get("truncate", True)
    freqs = yarn_reference(dim, base, factor, original, truncate=truncate)
    return freqs, scaling.get("attention_factor", 0.1 * math.log(factor) + 1)


def rms(x, weight, eps, one_plus):
    scale = (1 + weight) if one_plus else weight
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale


def rotate(x, positions, spec, seq_len):
    """Partial RoPE: the first rotary_dim features, as halves within that block."""
    r = spec["rotary_dim"]
    freqs, factor = frequencies(r, spec["base"], spec["scaling"], seq_len)
    angles = positions[:, None].double() * torch.tensor(freqs, dtype=torch.float64)
    cos, sin = angles.cos() * factor, angles.sin() * factor
    first, second, rest = x[..., : r // 2], x[..., r // 2 : r], x[..., r:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin, rest], dim=-1)


def project(x, w, name):
    bias = w.get(f"{name}.bias")
    return x @ w[f"{name}.weight"].T + (0 if bias is None else bias)


def queries_keys_values(x, w, spec, positions, seq_len):
    """Rotated queries (B, H, T, d), keys and values (B, H_kv, T, d) of the new tokens."""
    H, H_kv, d = spec["n_heads"], spec["n_kv_heads"], spec["head_dim"]
    q, k, v = project(x, w, "q_proj"), project(x, w, "k_proj"), project(x, w, "v_proj")
    norm = spec["qk_norm"]
    args = (spec["eps"], spec["one_plus"])
    if norm == "projection":
        q, k = rms(q, spec["q_norm"], *args), rms(k, spec["k_norm"], *args)
    q = q.view(*x.shape[:2], H, d).transpose(1, 2)
    k = k.view(*x.shape[:2], H_kv, d).transpose(1, 2)
    v = v.view(*x.shape[:2], H_kv, d).transpose(1, 2)
    if norm == "head":
        q, k = rms(q, spec["q_norm"], *args), rms(k, spec["k_norm"], *args)
    return rotate(q, positions, spec, seq_len), rotate(k, positions, spec, seq_len), v


def attend(x, w, spec, q, k, v, query_positions, pad):
    """Scores, masks (causal, window, padding), soft-cap, sinks, gate and output projection."""
    H, H_kv = spec["n_heads"], spec["n_kv_heads"]
    k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    scale = spec["scale"] or spec["head_dim"] ** -0.5
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, T, S)
    if spec["softcap"]:
        scores = spec["softcap"] * torch.tanh(scores / spec["softcap"])
    keys = torch.arange(k.size(2))
    allowed = keys[None, :] <= query_positions[:, None]
    if spec["window"]:
        allowed &= keys[None, :] > query_positions[:, None] - spec["window"]
    allowed = allowed[None, None] & (True if pad is None else pad[:, None, None, : k.size(2)])
    scores = scores.masked_fill(~allowed, -math.inf)
    if spec["sinks"] is not None:
        sink = spec["sinks"].view(1, H, 1, 1).expand(*scores.shape[:3], 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key: zero
    heads = weights @ v  # (B, H, T, d)
    if spec["gate"]:
        gate = torch.sigmoid(project(x, w, "gate_proj")).view(*x.shape[:2], H, -1)
        heads = heads * gate.transpose(1, 2)
    merged = heads.transpose(1, 2).reshape(*x.shape[:2], -1)
    return project(merged, w, "out_proj")


def reference(x, w, spec, pad=None):
    positions = torch.arange(x.size(1))
    q, k, v = queries_keys_values(x, w, spec, positions, x.size(1))
    return attend(x, w, spec, q, k, v, positions, pad)


def reference_decoding(x, w, spec, prefill, pad=None):
    """Token by token after a prefill: each call's keys keep the rotation they were given."""
    outputs, keys, values = [], [], []
    bounds = [0, prefill, *range(prefill + 1, x.size(1) + 1)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        positions = torch.arange(start, end)
        q, k, v = queries_keys_values(x[:, start:end], w, spec, positions, end)
        keys.append(k)
        values.append(v)
        k_all, v_all = torch.cat(keys, dim=2), torch.cat(values, dim=2)
        outputs.append(attend(x[:, start:end], w, spec, q, k_all, v_all, positions, pad))
    return torch.cat(outputs, dim=1)


def randomise(layer, one_plus=False, seed=0):
    """Random float64 parameters; returns the reference's weights (Gemma's norms: w, not 1+w)."""
    generator = torch.Generator().manual_seed(seed)
    layer.double()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    weights = {name: value.detach().clone() for name, value in layer.state_dict().items()}
    if one_plus and layer.q_norm is not None:
        for name in ("q_norm.weight", "k_norm.weight"):
            weights[name] = weights[name] * 0.1
        with torch.no_grad():
            layer.q_norm.weight.copy_(1 + weights["q_norm.weight"])
            layer.k_norm.weight.copy_(1 + weights["k_norm.weight"])
    return weights


def spec_of(layer, weights, *, one_plus=False, scaling=None, base=10000.0):
    """The reference's settings; every value is restated by the test that builds the layer."""
    return {
        "n_heads": layer.n_heads,
        "n_kv_heads": layer.n_kv_heads,
        "head_dim": layer.head_dim,
        "rotary_dim": layer.rotary_dim,
        "base": base,
        "scaling": scaling,
        "scale": layer.scale,
        "softcap": layer.logit_softcap,
        "window": layer.window,
        "qk_norm": layer.qk_norm,
        "eps": layer.q_norm.eps if layer.q_norm is not None else None,
        "one_plus": one_plus,
        "q_norm": weights.get("q_norm.weight"),
        "k_norm": weights.get("k_norm.weight"),
        "sinks": weights.get("sinks"),
        "gate": layer.gate_proj is not None,
    }


def inputs(d_model, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, d_model, generator=generator, dtype=torch.float64)


def left_padding(lengths=(T, 4)):
    return torch.arange(T)[None, :] >= T - torch.tensor(lengths)[:, None]  # (B, S)


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4}
OPTIONS = {
    "head width and scale": ({"head_dim": 6, "scale": 0.3}, None),
    "partial rotary, per-head norm": (
        {"head_dim": 8, "rope_fraction": 0.25, "qk_norm": "head"},
        None,
    ),
    "projection norm": ({"qk_norm": "projection", "qk_norm_eps": 1e-5}, None),
    "True means per head": ({"qk_norm": True, "qk_norm_eps": 0.5}, None),
    "linear scaling": ({}, {"rope_type": "linear", "factor": 2.0}),
    "yarn": ({"head_dim": 8}, {**YARN, "truncate": False}),
    "llama3": (
        {"head_dim": 16},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    "window, sinks, gate": ({"window": 3, "sinks": True, "output_gate": True}, None),
    "window, soft-cap": ({"window": 2, "logit_softcap": 2.0, "head_dim": 8, "scale": 0.25}, None),
}


def build(options, scaling, d_model=16, n_heads=4, n_kv_heads=2, cls=GroupedQueryAttention):
    extra = {"rope": True, "rope_layout": "halves", "rope_scaling": scaling}
    return cls(d_model, n_heads, n_kv_heads, **extra, **options)


@pytest.mark.parametrize("name", OPTIONS)
def test_every_option_matches_the_reference(name):
    options, scaling = OPTIONS[name]
    layer = build(options, scaling)
    weights = randomise(layer)
    spec = spec_of(layer, weights, scaling=scaling)
    x = inputs(16)
    causal = {"is_causal": True}
    output, _ = layer(x, **causal)
    torch.testing.assert_close(output, reference(x, weights, spec), rtol=1e-10, atol=1e-10)
    with_weights, _ = layer(x, **causal, need_weights=True)
    torch.testing.assert_close(with_weights, output, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", OPTIONS)
def test_cached_decoding_matches_the_reference(name):
    options, scaling = OPTIONS[name]
    layer = build(options, scaling)
    weights = randomise(layer)
    x = inputs(16)
    cache = KVCache()
    outputs = [layer(x[:, :3], is_causal=True, cache=cache)[0]]
    outputs += [layer(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(3, T)]
    expected = reference_decoding(x, weights, spec_of(layer, weights, scaling=scaling), 3)
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected, rtol=1e-10, atol=1e-10)


def test_dynamic_scaling_decoding_keeps_each_keys_rotation():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}
    layer = build({"head_dim": 8}, scaling)
    weights = randomise(layer)
    spec = spec_of(layer, weights, scaling=scaling)
    x = inputs(16)
    full, _ = layer(x, is_causal=True)
    torch.testing.assert_close(full, reference(x, weights, spec), rtol=1e-10, atol=1e-10)
    cache = KVCache()
    outputs = [layer(x[:, :3], is_causal=True, cache=cache)[0]]
    outputs += [layer(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(3, T)]
    decoded = torch.cat(outputs, dim=1)
    expected = reference_decoding(x, weights, spec, 3)
    torch.testing.assert_close(decoded, expected, rtol=1e-10, atol=1e-10)
    # past the original length the two differ: cached keys were rotated with older frequencies
    assert not torch.allclose(decoded[:, -1], full[:, -1], atol=1e-6)
    # up to the original length (4) nothing is scaled: decoding equals one call on 4 tokens
    short, _ = layer(x[:, :4], is_causal=True)
    torch.testing.assert_close(decoded[:, :4], short, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("sinks", [False, True])
def test_window_with_a_left_padded_batch(sinks):
    layer = build({"window": 3, "sinks": sinks, "head_dim": 8}, None)
    weights = randomise(layer)
    spec = spec_of(layer, weights)
    x, pad = inputs(16), left_padding()
    output, _ = layer(x, mask=pad[:, None, None, :], is_causal=True)
    expected = reference(x, weights, spec, pad)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-10)
    assert torch.isfinite(output).all()
    # the padded row's real tokens give what the unpadded sequence gives
    alone, _ = layer(x[1:, T - 4 :], is_causal=True)
    torch.testing.assert_close(output[1:, T - 4 :], alone, rtol=1e-10, atol=1e-10)
    cache = KVCache()
    outputs = [layer(x[:, :3], mask=pad[:, None, None, :3], is_causal=True, cache=cache)[0]]
    for t in range(3, T):
        step_mask = pad[:, None, None, : t + 1]
        outputs.append(layer(x[:, t : t + 1], mask=step_mask, is_causal=True, cache=cache)[0])
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected, rtol=1e-10, atol=1e-10)


def test_projection_norm_has_one_weight_per_projection():
    layer = build({"qk_norm": "projection", "head_dim": 6}, None, d_model=12)
    layer_mha = MultiHeadAttention(12, 4, qk_norm="projection", head_dim=5, scale=0.5)
    assert layer.q_norm.weight.shape == (24,) and layer.k_norm.weight.shape == (12,)
    assert layer_mha.q_norm.weight.shape == (20,) and layer_mha.k_norm.weight.shape == (20,)
    assert layer_mha.out_proj.weight.shape == (12, 20) and layer_mha.scale == 0.5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"head_dim": 0}, "head_dim: expected a positive int, got 0"),
        ({"head_dim": 4.0}, "head_dim: expected a positive int, got 4.0"),
        ({"scale": 0.0}, "scale: expected a finite number > 0, got 0.0"),
        ({"scale": float("inf")}, "scale: expected a finite number > 0, got inf"),
        ({"rope_fraction": 0.0}, "rope_fraction: expected a number in (0, 1], got 0.0"),
        ({"rope_fraction": 1.5}, "rope_fraction: expected a number in (0, 1], got 1.5"),
        ({"rope_fraction": 0.1}, "got 0 (head_dim = 4)"),
        ({"qk_norm": "heads"}, "qk_norm: expected one of (False, True, 'head', 'projection')"),
        ({"qk_norm": 1}, "qk_norm: expected one of"),
        ({"qk_norm_eps": 0.0}, "qk_norm_eps: expected a finite number > 0, got 0.0"),
        ({"rope_scaling": {"rope_type": "linear"}}, "rope_scaling: rope_type 'linear' needs"),
        ({"rope_scaling": "yarn"}, "rope_scaling: expected None or a dict"),
    ],
)
def test_bad_options_are_refused_naming_the_argument(options, message):
    with raises(message):
        GroupedQueryAttention(16, 4, 2, rope=True, **options)


def test_rotary_options_need_rope():
    with raises("rope: rope_fraction (0.5) and rope_scaling (None) only apply with rope=True"):
        GroupedQueryAttention(16, 4, 2, rope_fraction=0.5)


def test_window_mask_must_be_boolean_and_fit():
    layer = GroupedQueryAttention(16, 4, 2, window=3)
    x = torch.randn(2, 5, 16)
    with raises("mask: a sliding-window layer combines its window with a boolean mask"):
        layer(x, mask=torch.zeros(2, 1, 1, 5), is_causal=True)
    with raises("mask: shape (2, 1, 1, 4) does not broadcast"):
        layer(x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool), is_causal=True)
    with raises("is_causal: this layer has a sliding window"):
        layer(x, mask=torch.ones(2, 1, 1, 5, dtype=torch.bool))


# ---- the loader ------------------------------------------------------------------------------

EXPECTED = {  # from each model card / config: (H, H_kv, d_head, D, scale, sliding layers of 0..5)
    "llama-3.1-8b": (32, 8, 128, 4096, None, []),
    "mistral-7b-v0.1": (32, 8, 128, 4096, None, [0, 1, 2, 3, 4, 5]),
    "gemma-2-2b": (8, 4, 256, 2304, 256**-0.5, [0, 2, 4]),
    "gemma-3-4b": (8, 4, 256, 2560, 256**-0.5, [0, 1, 2, 3, 4]),
    "qwen3-0.6b": (16, 8, 128, 1024, None, []),
    "qwen3-next-80b-a3b": (16, 2, 256, 2048, None, []),
    "olmo-2-0425-1b": (16, 16, 128, 2048, None, []),
    "gpt-oss-20b": (64, 8, 64, 2880, None, [0, 2, 4]),
}
POSITIONS = {  # bases, scaling, factor, rotary fraction, layers without positions, layers
    "llama-3.1-8b": ([500000.0], "llama3", 8.0, 1.0, 0, 32),
    "mistral-7b-v0.1": ([10000.0], None, None, 1.0, 0, 32),
    "gemma-2-2b": ([10000.0], None, None, 1.0, 0, 26),
    "gemma-3-4b": ([10000.0, 1000000.0], "linear", 8.0, 1.0, 0, 34),
    "qwen3-0.6b": ([1000000.0], None, None, 1.0, 0, 28),
    "qwen3-next-80b-a3b": ([10000000.0], None, None, 0.25, 36, 48),
    "olmo-2-0425-1b": ([500000.0], None, None, 1.0, 0, 16),
    "gpt-oss-20b": ([150000.0], "yarn", 32.0, 1.0, 0, 24),
}


def meta_layer(config, idx):
    with torch.device("meta"):
        return attention_layer_from_config(config, idx)


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_shipped_configs_give_the_models_layers(name):
    config = shipped_model_config(name)
    n_heads, n_kv, head_dim, d_model, scale, sliding = EXPECTED[name]
    idx = 3 if name.startswith("qwen3-next") else 0
    layer = meta_layer(config, idx)
    assert (layer.n_heads, layer.n_kv_heads, layer.head_dim, layer.d_model) == EXPECTED[name][:4]
    assert layer.q_proj.weight.shape == (n_heads * head_dim, d_model)
    assert layer.out_proj.weight.shape == (d_model, n_heads * head_dim)
    assert layer.scale == scale
    kinds = layer_types(config)
    assert [i for i in range(6) if kinds[i] == "sliding_attention"] == sliding
    for i in sliding[:1]:
        assert meta_layer(config, i).window == config["sliding_window"]
    assert position_settings(config) == dict(
        zip(
            ("rope_bases", "scaling", "factor", "rope_fraction", "layers_without_positions"),
            POSITIONS[name][:5],
            strict=True,
        ),
        layers=POSITIONS[name][5],
    )


def test_model_specific_settings():
    gemma2 = meta_layer(shipped_model_config("gemma-2-2b"), 1)
    assert gemma2.logit_softcap == 50.0 and gemma2.window is None and gemma2.q_norm is None
    gemma3 = shipped_model_config("gemma-3-4b")
    local, global_ = meta_layer(gemma3, 0), meta_layer(gemma3, 5)
    assert (local.rope_base, local.rope_scaling, local.window) == (10000.0, None, 1024)
    assert global_.rope_base == 1e6 and global_.window is None
    assert global_.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert local.qk_norm == "head" and local.q_norm.eps == 1e-6 and local.logit_softcap is None
    olmo = meta_layer(shipped_model_config("olmo-2-0425-1b"), 0)
    assert olmo.qk_norm == "projection" and olmo.q_norm.weight.shape == (2048,)
    assert olmo.q_norm.eps == 1e-6 and olmo.q_proj.bias is None
    qwen_next = meta_layer(shipped_model_config("qwen3-next-80b-a3b"), 3)
    assert qwen_next.rotary_dim == 64 and qwen_next.gate_proj.weight.shape == (4096, 2048)
    gpt_oss = meta_layer(shipped_model_config("gpt-oss-20b"), 0)
    assert gpt_oss.sinks.shape == (64,) and gpt_oss.q_proj.bias is not None
    assert gpt_oss.rope_scaling == {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "original_max_position_embeddings": 4096,
        "truncate": False,
    }
    llama = meta_layer(shipped_model_config("llama-3.1-8b"), 31)
    assert llama.rope_scaling["rope_type"] == "llama3" and llama.rope_layout == "halves"


def transformers5(config):
    """The same config as transformers 5.x writes it: rope_parameters, per layer type for
    Gemma 3."""
    config = dict(config)
    theta = config.pop("rope_theta")
    scaling = config.pop("rope_scaling", None) or {"rope_type": "default"}
    params = {**scaling, "rope_theta": theta}
    if "partial_rotary_factor" in config:
        params["partial_rotary_factor"] = config.pop("partial_rotary_factor")
    if config["model_type"] == "gemma3_text":
        local = {"rope_type": "default", "rope_theta": config.pop("rope_local_base_freq")}
        params = {"full_attention": params, "sliding_attention": local}
    config["rope_parameters"] = params
    return config


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_both_spellings_give_the_same_layers(name):
    config = shipped_model_config(name)
    for idx in (3, 7) if name.startswith("qwen3-next") else (3, 5):
        published, current = meta_layer(config, idx), meta_layer(transformers5(config), idx)
        for attribute in ("rope_base", "rope_scaling", "rotary_dim", "window", "scale"):
            assert getattr(published, attribute) == getattr(current, attribute)


def small(name):
    """The shipped config shrunk to a few features, its model type and pattern kept."""
    config = dict(shipped_model_config(name))
    config.update(hidden_size=16, num_attention_heads=4, sliding_window=3)
    config["num_key_value_heads"] = 4 if name.startswith("olmo") else 2
    if "head_dim" in config:
        config["head_dim"] = 8
    return config


MODEL_FACTS = {  # from each model's modeling code: norm, (1 + w), gate, sinks, scale rule
    "llama": (None, False, False, False),
    "mistral": (None, False, False, False),
    "gemma2": (None, False, False, False),
    "gemma3_text": ("head", True, False, False),
    "qwen3": ("head", False, False, False),
    "qwen3_next": ("head", True, True, False),
    "olmo2": ("projection", False, False, False),
    "gpt_oss": (None, False, False, True),
}


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_each_models_layer_matches_its_reference(name):
    config = small(name)
    norm, one_plus, gate, sinks = MODEL_FACTS[config["model_type"]]
    gemma = config["model_type"].startswith("gemma")
    for idx in (3, 7) if name.startswith("qwen3-next") else (3, 5):
        layer = attention_layer_from_config(config, idx)
        weights = randomise(layer, one_plus=one_plus)
        kind = layer_types(config)[idx]
        local_gemma3 = config["model_type"] == "gemma3_text" and kind == "sliding_attention"
        base = config["rope_local_base_freq"] if local_gemma3 else config["rope_theta"]
        scaling = None if local_gemma3 else config.get("rope_scaling")
        spec = spec_of(layer, weights, one_plus=one_plus, scaling=scaling, base=base)
        spec.update(
            qk_norm=norm,
            gate=gate,
            scale=config["query_pre_attn_scalar"] ** -0.5 if gemma else None,
            softcap=config.get("attn_logit_softcapping"),
            window=3 if kind == "sliding_attention" else None,
            rotary_dim=int(layer.head_dim * config.get("partial_rotary_factor", 1.0)),
            eps=config["rms_norm_eps"],
        )
        assert (spec["sinks"] is not None) == sinks
        x = inputs(16)
        output, _ = layer(x, is_causal=True)
        torch.testing.assert_close(output, reference(x, weights, spec), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "phi3"}, "config: model_type must be one of"),
        ({"model_type": "gemma3"}, "(pass its text_config)"),
        ({"clip_qkv": 8.0}, "config: clip_qkv = 8.0 is not part of"),
        ({"attn_logit_softcapping": 30.0}, "attn_logit_softcapping = 30.0"),
        ({"use_sliding_window": True}, "use_sliding_window is not read for llama"),
        ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "rope_scaling['rope_type']"),
        (
            {
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 8.0,
                    "original_max_position_embeddings": 8192,
                    "mscale": 1.0,
                }
            },
            "not understood ['mscale']",
        ),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            "has YaRN factor 4.0 but max_position_embeddings / original",
        ),
        ({"layer_types": ["full_attention"]}, "layer_types must list num_hidden_layers = 32"),
        ({"hidden_size": None}, "config: the key 'hidden_size' is needed"),
    ],
)
def test_loader_refusals(change, message):
    config = {**shipped_model_config("llama-3.1-8b"), "max_position_embeddings": 65536, **change}
    with raises(message):
        meta_layer(config, 0)


def test_loader_refuses_layers_it_cannot_build():
    qwen_next = shipped_model_config("qwen3-next-80b-a3b")
    with raises("layer_idx: layer 0 of this qwen3_next is a linear-attention layer"):
        meta_layer(qwen_next, 0)
    with raises("layer_idx: expected an int in [0, 47], got 48"):
        meta_layer(qwen_next, 48)
    with raises("layer_idx: expected an int in [0, 47], got True"):
        meta_layer(qwen_next, True)
    with raises("config: expected a dict"):
        attention_layer_from_config("llama")
    with raises("name: expected one of"):
        shipped_model_config("llama-2")
