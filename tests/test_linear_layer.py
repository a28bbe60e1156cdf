"""Gated DeltaNet layer, its decoding state, the hybrid decoder and the refusal of bad gates."""

from types import SimpleNamespace

import pytest
import torch

from attnbook.linear import gated_deltanet
from attnbook.linear.delta_rule import gated_delta_rule
from attnbook.linear.gated_deltanet import GatedDeltaNet
from attnbook.linear.linear_attention import linear_attention
from attnbook.linear.linear_layer import LinearAttentionLayer
from attnbook.models.decoder import TinyDecoder
from attnbook.models.recall import IGNORE, mqar_batch


def qkv(length=6):
    generator = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 2, length, 4, generator=generator) for _ in range(2))
    v = torch.randn(1, 2, length, 3, generator=generator)
    return q, k, v, torch.full((1, 2, length), 0.9), torch.full((1, 2, length), 0.5)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("alpha", 0.0, r"alpha: expected every value in \(0, 1\], got 12 outside, e.g. 0.0"),
        ("alpha", 1.5, r"alpha: expected every value in \(0, 1\].*1.5"),
        ("alpha", float("nan"), r"alpha: expected every value in \(0, 1\].*nan"),
        ("beta", -0.1, r"beta: expected every value in \[0, 1\].*-0.1"),
        ("beta", 2.0, r"beta: expected every value in \[0, 1\].*2.0"),
    ],
)
def test_gates_outside_their_range_are_refused_by_name(name, value, message):
    q, k, v, alpha, beta = qkv()
    gates = {"alpha": alpha, "beta": beta}
    gates[name] = torch.full_like(gates[name], value)
    with pytest.raises(ValueError, match=message):
        gated_delta_rule(q, k, v, **gates)


@pytest.mark.parametrize("name", ["alpha", "beta"])
def test_gates_of_the_wrong_shape_or_type_are_refused_by_name(name):
    q, k, v, alpha, beta = qkv()
    gates = {"alpha": alpha, "beta": beta}
    gates[name] = gates[name][..., None]
    with pytest.raises(ValueError, match=rf"{name}: expected shape \(B, H, T\) = \(1, 2, 6\)"):
        gated_delta_rule(q, k, v, **gates)
    gates[name] = 0.5
    with pytest.raises(ValueError, match=f"{name}: expected a tensor of shape"):
        gated_delta_rule(q, k, v, **gates)


def test_bad_qkv_state_and_options_are_refused_by_name():
    q, k, v, alpha, beta = qkv()
    with pytest.raises(ValueError, match="k: expected the shape of q"):
        gated_delta_rule(q, k[..., :3], v, alpha, beta)
    with pytest.raises(ValueError, match=r"v: expected \(B, H, T, d_v\)"):
        gated_delta_rule(q, k, v[:, :, :4], alpha, beta)
    with pytest.raises(ValueError, match=r"initial_state: expected shape \(B, H, d_k, d_v\)"):
        gated_delta_rule(q, k, v, alpha, beta, initial_state=torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="chunk_size: expected a positive int, got 0"):
        gated_delta_rule(q, k, v, alpha, beta, chunk_size=0)
    with pytest.raises(ValueError, match="q: expected a floating-point tensor"):
        linear_attention(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match="form: .*'fast'"):
        linear_attention(q, k, v, form="fast")
    with pytest.raises(ValueError, match="feature_map: .*'softmax'"):
        linear_attention(q, k, v, feature_map="softmax")


def test_decoding_one_token_at_a_time_equals_the_chunked_pass():
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, chunk_size=8).double()
    x = torch.randn(2, 21, 16, dtype=torch.float64)
    whole, _ = layer(x)
    state = layer.new_cache()
    outputs = [layer(x[:, :5], cache=state)[0]]  # a prompt, chunked
    for t in range(5, 21):
        outputs.append(layer(x[:, t : t + 1], cache=state)[0])
        assert state.memory.shape == (2, 2, 8, 8)  # the same size after every token
    torch.testing.assert_close(torch.cat(outputs, dim=1), whole, rtol=0, atol=1e-12)
    assert len(state) == 21
    # the state after decoding is the final state of one chunked pass of the layer's rule
    q, k, v = (
        layer._heads(part) for part in layer._convolve(layer.qkv_proj(x), None)[0].chunk(3, dim=-1)
    )
    _, final = layer.mix(q, k, v, x, None)
    torch.testing.assert_close(state.memory, final, rtol=0, atol=1e-12)


def test_the_rms_norm_divides_the_scale_of_q_out_again(monkeypatch):
    # the docstring's claim: with eps = 0, q's 1 / sqrt(d_head) changes nothing downstream
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, chunk_size=4).double()
    layer.norm.eps = 0.0
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    q, k, v = (
        layer._heads(part) for part in layer._convolve(layer.qkv_proj(x), None)[0].chunk(3, dim=-1)
    )
    with torch.no_grad():
        mixed, _ = layer.mix(q, k, v, x, None)
        shipped, _ = layer(x)
        # q scaled by 1 / 0.01 = 100 instead of 1 / sqrt(8)
        monkeypatch.setattr(gated_deltanet, "math", SimpleNamespace(sqrt=lambda n: 0.01))
        rescaled, _ = layer.mix(q, k, v, x, None)
        unscaled, _ = layer(x)
    assert not torch.allclose(rescaled, mixed)  # the heads' raw outputs do change
    torch.testing.assert_close(unscaled, shipped, rtol=0, atol=1e-12)


def test_the_layer_refuses_masks_and_linear_layer_refuses_caches():
    layer = GatedDeltaNet(8, 2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match="mask: a Gated DeltaNet layer is causal"):
        layer(x, mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask: a Gated DeltaNet layer is causal"):
        layer(x, is_causal=False)
    with pytest.raises(ValueError, match="n_heads: must divide d_model = 8, got 3"):
        GatedDeltaNet(8, 3)
    with pytest.raises(ValueError, match="cache: LinearAttentionLayer has no decoding path"):
        LinearAttentionLayer(8, 2).new_cache()


def test_a_hybrid_decoder_decodes_with_states_and_caches_as_it_computes_whole():
    torch.manual_seed(0)
    model = TinyDecoder(11, d_model=16, n_heads=2, n_layers=4, max_len=20, layer_pattern="GGGA")
    model = model.double().eval()
    assert model.variant == "mha"
    tokens = torch.randint(0, 11, (2, 12))
    whole = model(tokens)
    caches = model.new_caches()
    steps = [model(tokens[:, :4], caches)]
    steps += [model(tokens[:, t : t + 1], caches) for t in range(4, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=0, atol=1e-10)
    assert [type(c).__name__ for c in caches] == ["RecurrentState"] * 3 + ["KVCache"]
    head_mask = torch.ones(4, 2, dtype=torch.float64)
    torch.testing.assert_close(model(tokens, head_mask=head_mask), whole)


def test_layer_pattern_is_checked():
    for bad in ("GGG", "GGXA", 4):
        with pytest.raises(ValueError, match="layer_pattern: expected 4 letters"):
            TinyDecoder(5, d_model=8, n_heads=2, n_layers=4, max_len=8, layer_pattern=bad)
    model = TinyDecoder(5, d_model=8, n_heads=2, n_layers=2, max_len=8, layer_pattern="LG")
    assert model.variant == "linear" and model(torch.zeros(1, 3, dtype=torch.long)).shape == (
        1,
        3,
        5,
    )


def test_mqar_batches_ask_for_every_key_once_with_its_value():
    tokens, targets = mqar_batch(4, 6, torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (4, 24)
    for row, target in zip(tokens, targets, strict=True):
        filed = dict(zip(row[:12:2].tolist(), row[1:12:2].tolist(), strict=True))
        assert len(filed) == 6  # distinct keys
        asked = row[12::2].tolist()
        assert sorted(asked) == sorted(filed)
        assert target[12::2].tolist() == [filed[key] for key in asked]
        assert (target[:12] == IGNORE).all() and (target[13::2] == IGNORE).all()


def test_the_one_token_convolution_equals_the_conv1d_path():
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2).double()
    past = torch.randn(3, layer.conv_kernel - 1, 48, dtype=torch.float64)  # (B, K - 1, 3D)
    token = torch.randn(3, 1, 48, dtype=torch.float64)  # (B, 1, 3D)
    decoded, decoded_past = layer._convolve(token, past)
    padded = torch.cat([past, token], dim=1).transpose(1, 2)  # (B, 3D, K)
    expected = torch.nn.functional.silu(layer.conv(padded)).transpose(1, 2)  # (B, 1, 3D)
    torch.testing.assert_close(decoded, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(decoded_past, torch.cat([past, token], dim=1)[:, 1:])


def test_linear_layer_gives_elu_the_raw_queries_and_keys_so_its_reads_follow_the_query():
    """Katharopoulos et al. apply elu + 1 to q and k as projected. Gated DeltaNet's preparation
    (unit q scaled by 1 / sqrt(d_head)) would put every entry of q near 0, where
    elu(x) + 1 ~ 1: weights nearly uniform whatever the query, a read blind to it."""
    torch.manual_seed(0)
    layer = LinearAttentionLayer(32, 2, chunk_size=8).double()
    x = torch.randn(2, 20, 32, dtype=torch.float64)  # (B, T, D)
    mixed, _ = layer._convolve(layer.qkv_proj(x), None)  # (B, T, 3D)
    q, k, v = (layer._heads(part) for part in mixed.chunk(3, dim=-1))  # (B, H, T, d_head)
    out, memory = layer.mix(q, k, v, x, None)
    assert memory is None
    torch.testing.assert_close(out, linear_attention(q, k, v), rtol=0, atol=1e-12)
    # two unrelated queries read the same keys and values, all of unit scale: the reads
    # differ by 0.13 (relative); with Gated DeltaNet's preparation of q they would by 0.011
    generator = torch.Generator().manual_seed(1)
    first, second, keys, values = (
        torch.randn(2, 2, 20, 16, generator=generator, dtype=torch.float64) for _ in range(4)
    )
    read_first, read_second = (
        layer.mix(query, keys, values, x, None)[0] for query in (first, second)
    )
    assert (read_first - read_second).norm() / read_first.norm() > 0.05
