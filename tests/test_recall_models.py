"""Chapter 18's shipped recall models: the loader, and the manifest's accuracies reproduced.

The manifest's key metric is every run's MQAR accuracy per number of pairs; here each shipped
model is measured again on the same fixed sequences and must give it (argmax ties aside, which
could differ between CPUs: at most one answer in a hundred).
"""

import math

import pytest
import torch
from torch.nn import functional as F

from attnbook.models.recall import (
    EVAL_PAIRS,
    ShortConvAttention,
    accuracy_by_pairs,
    build_recall_model,
    decay_gates,
    held_floats,
    last_softmax_weights,
    load_recall_models,
    state_floats,
)


@pytest.fixture(scope="module")
def shipped():
    return load_recall_models("cpu")


def test_every_run_is_shipped_with_its_record(shipped):
    manifest, models = shipped
    architectures, heads = manifest["architectures"], manifest["heads"]
    seeds = manifest["training"]["seeds"]
    assert len(seeds) >= 2
    expected = {f"{a}/h{h}/seed{s}" for a in architectures for h in heads for s in seeds}
    assert set(models) == set(manifest["runs"]) == expected
    for name, model in models.items():
        run = manifest["runs"][name]
        assert model.layer_pattern == architectures[run["architecture"]] == run["layer_pattern"]
        assert run["state_floats"] == state_floats(model)
        assert run["parameters"] == sum(p.numel() for p in model.parameters())
        assert run["steps"] == manifest["training"]["steps"][run["architecture"]]
        assert not model.training


def test_the_manifest_accuracies_are_what_the_shipped_weights_give(shipped):
    manifest, models = shipped
    assert tuple(manifest["evaluation"]["pairs"]) == EVAL_PAIRS
    for name, model in models.items():
        measured = accuracy_by_pairs(model)
        recorded = manifest["runs"][name]["accuracy"]
        assert set(measured) == set(recorded)
        for pairs, value in measured.items():
            assert value == pytest.approx(recorded[pairs], abs=0.01), (name, pairs)


def test_state_floats_count_the_linear_layers_only():
    config = {"d_model": 32, "n_layers": 2, "max_len": 32, "positions": "rope"}
    assert state_floats(build_recall_model({**config, "n_heads": 4}, "AA")) == 0
    assert state_floats(build_recall_model({**config, "n_heads": 4}, "GA")) == 4 * 8 * 8
    assert state_floats(build_recall_model({**config, "n_heads": 1}, "GG")) == 2 * 32 * 32


def test_held_floats_count_memory_normaliser_convolution_and_cache_by_hand():
    config = {"d_model": 32, "n_layers": 4, "max_len": 32, "positions": "rope"}
    # Gated DeltaNet: 4 heads of 8 x 8, and the last 3 inputs of its 96 convolved channels
    gdn = held_floats(build_recall_model({**config, "n_heads": 4, "n_layers": 1}, "G"), 16)
    assert gdn == {"memory": 256, "normaliser": 0, "convolution": 288, "kv_cache": 0}
    # linear attention adds its normaliser z, one head of 32
    linear = held_floats(build_recall_model({**config, "n_heads": 1, "n_layers": 1}, "L"), 16)
    assert linear == {"memory": 1024, "normaliser": 32, "convolution": 288, "kv_cache": 0}
    # softmax: K and V of 16 tokens, and the last 3 of the D inputs its convolution sees
    hybrid = held_floats(build_recall_model({**config, "n_heads": 4}, "GGGA"), 16)
    assert hybrid == {
        "memory": 3 * 256,
        "normaliser": 0,
        "convolution": 3 * 288 + 3 * 32,
        "kv_cache": 2 * 32 * 16,
    }
    with pytest.raises(ValueError, match="n_tokens"):
        held_floats(build_recall_model({**config, "n_heads": 4, "n_layers": 1}, "G"), -1)


def test_accuracy_by_pairs_measures_every_model_on_the_same_sequences():
    torch.manual_seed(0)
    config = {"d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16, "positions": "rope"}
    model = build_recall_model(config, "G")
    first = accuracy_by_pairs(model, pairs=(2, 3), size=8)
    assert list(first) == ["2", "3"] and first == accuracy_by_pairs(model, pairs=(2, 3), size=8)
    assert model.training  # its mode is restored


def test_the_short_chunks_give_the_default_chunks_numbers():
    torch.manual_seed(0)
    config = {"d_model": 16, "n_heads": 2, "n_layers": 2, "max_len": 48, "positions": "rope"}
    model = build_recall_model(config, "GL").double()
    tokens = torch.randint(0, 64, (2, 40))
    short = model(tokens)
    for block in model.blocks:
        block.attention.chunk_size = 64
    torch.testing.assert_close(short, model(tokens), rtol=0, atol=1e-10)


def test_the_softmax_layers_convolve_causally_and_refuse_a_cache():
    torch.manual_seed(0)
    config = {"d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16, "positions": "none"}
    model = build_recall_model(config, "A").double()
    assert isinstance(model.blocks[0].attention, ShortConvAttention)
    tokens = torch.randint(0, 64, (2, 12))
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 64
    torch.testing.assert_close(model(tokens)[:, :8], model(changed)[:, :8], rtol=0, atol=0)
    assert not torch.allclose(model(tokens)[:, 8], model(changed)[:, 8])
    with pytest.raises(ValueError, match="cache"):
        model.new_caches()


def test_the_gated_deltanet_layers_start_with_a_long_memory():
    torch.manual_seed(0)
    config = {"d_model": 16, "n_heads": 2, "n_layers": 2, "max_len": 16, "positions": "none"}
    model = build_recall_model(config, "GA")
    alpha, _ = model.blocks[0].attention.gates(torch.randn(2, 8, 16))  # (B, H, T)
    assert alpha.min() > 0.97


def test_last_softmax_weights_are_the_explicit_paths_of_the_last_softmax_layer():
    torch.manual_seed(0)
    config = {"d_model": 16, "n_heads": 2, "n_layers": 2, "max_len": 16, "positions": "none"}
    model = build_recall_model(config, "AA").double()
    tokens = torch.randint(0, 64, (3, 12))
    weights = last_softmax_weights(model, tokens)  # (B, H, T, T)
    _, every_layer = model.forward_with_weights(tokens)  # (L, B, H, T, T)
    torch.testing.assert_close(weights, every_layer[1], rtol=0, atol=1e-12)
    assert not torch.allclose(weights, every_layer[0])  # the last layer's, not the first's
    hybrid = build_recall_model(config, "GA").double()
    weights = last_softmax_weights(hybrid, tokens)
    assert weights.shape == (3, 2, 12, 12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 12, dtype=torch.float64))
    assert (weights.triu(1) == 0).all()  # causal
    assert not hybrid.blocks[1].attention._forward_pre_hooks  # the hook is gone
    with pytest.raises(ValueError, match=r"model: expected a softmax \('A'\) layer.*'GG'"):
        last_softmax_weights(build_recall_model(config, "GG"), tokens)


def test_decay_gates_are_each_gated_deltanet_layers_alpha():
    torch.manual_seed(0)
    config = {"d_model": 16, "n_heads": 2, "n_layers": 4, "max_len": 16, "positions": "none"}
    model = build_recall_model(config, "GAGG").double()
    with torch.no_grad():  # block 2: a constant alpha, exp(-e^A softplus(b)) per head
        model.blocks[2].attention.a_proj.weight.zero_()
        model.blocks[2].attention.A_log.copy_(torch.tensor([0.0, 1.0]))
        model.blocks[2].attention.dt_bias.copy_(torch.tensor([0.0, -1.0]))
    tokens = torch.randint(0, 64, (3, 12))
    alphas = decay_gates(model, tokens)
    assert sorted(alphas) == [0, 2, 3] and alphas[0].shape == (3, 2, 12)
    rate = torch.tensor([1.0, math.e], dtype=torch.float64) * F.softplus(
        torch.tensor([0.0, -1.0], dtype=torch.float64)
    )
    expected = torch.exp(-rate)[None, :, None].expand(3, 2, 12)  # (B, H, T)
    torch.testing.assert_close(alphas[2], expected, rtol=0, atol=1e-12)
    assert alphas[0].std() > 0 and (alphas[0] > 0.9).all()  # from x, near DT_BIAS_INIT's
    assert not any(block.attention._forward_pre_hooks for block in model.blocks)
    with pytest.raises(ValueError, match=r"model: expected a Gated DeltaNet \('G'\).*'AA'"):
        decay_gates(build_recall_model(config | {"n_layers": 2}, "AA"), tokens)
