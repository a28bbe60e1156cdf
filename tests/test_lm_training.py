"""Training a tiny language model, and TinyDecoder's attention variants (MHA, GQA, MQA, MLA)."""

import dataclasses
import math
import re

import pytest
import torch

from attnbook import (
    GroupedQueryAttention,
    KVCache,
    LatentCache,
    MultiHeadLatentAttention,
    TinyDecoder,
    evaluate_loss,
    greedy_generate,
    next_token_loss,
    train_language_model,
)
from attnbook.models.lm_training import TrainingHistory

VOCAB, D_MODEL, N_HEADS, MAX_LEN = 7, 16, 4, 24
VARIANTS = [  # (variant, TinyDecoder keywords that make it)
    ("mha", {}),
    ("gqa", {"n_kv_heads": 2}),
    ("mqa", {"n_kv_heads": 1}),
    ("mla", {"kv_latent_dim": 6}),
    ("mla", {"kv_latent_dim": 6, "rope_dim": 2}),
]


def decoder(**keywords):
    torch.manual_seed(0)
    sizes = {"d_model": D_MODEL, "n_heads": N_HEADS, "n_layers": 2, "max_len": MAX_LEN}
    return TinyDecoder(VOCAB, **sizes, **keywords)


def periodic_ids(n=400):
    return torch.arange(n) % VOCAB  # 0 1 2 ... 6 0 1 ...: the next id is always predictable


@pytest.mark.parametrize(("variant", "keywords"), VARIANTS)
def test_every_variant_decodes_the_same_with_and_without_its_cache(variant, keywords):
    model = decoder(**keywords).eval()
    expected = MultiHeadLatentAttention if variant == "mla" else GroupedQueryAttention
    assert all(isinstance(block.attention, expected) for block in model.blocks)
    caches = model.new_caches()
    assert all(isinstance(c, LatentCache if variant == "mla" else KVCache) for c in caches)
    prompt = torch.tensor([[1, 2, 3]])
    cached_tokens, cached_logits = greedy_generate(model, prompt, 10, use_cache=True)
    full_tokens, full_logits = greedy_generate(model, prompt, 10, use_cache=False)
    assert torch.equal(cached_tokens, full_tokens)
    torch.testing.assert_close(cached_logits, full_logits)


@pytest.mark.parametrize(("variant", "keywords"), VARIANTS)
def test_attention_weights_are_causal_and_match_the_layer(variant, keywords):
    model = decoder(**keywords).eval()
    tokens = torch.tensor([[0, 3, 1, 4, 1]])
    weights = model.attention_weights(tokens)  # (L, B, H, T, T)
    assert weights.shape == (2, 1, N_HEADS, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1, N_HEADS, 5))
    assert torch.all(weights.triu(diagonal=1) == 0)
    with torch.no_grad():
        embedded = model.token_embedding(tokens) + model.position_embedding(torch.arange(5))
        block = model.blocks[0]
        _, first = block.attention(
            block.attention_norm(embedded), is_causal=True, need_weights=True
        )
    torch.testing.assert_close(weights[0], first)


@pytest.mark.parametrize(("variant", "keywords"), VARIANTS)
def test_variant_is_read_off_the_layers(variant, keywords):
    assert decoder(**keywords).variant == variant


def test_default_is_multi_head_attention():
    model = decoder()
    assert all(block.attention.n_kv_heads == N_HEADS for block in model.blocks)


def test_attention_argument_errors():
    with pytest.raises(ValueError, match="n_kv_heads: latent attention .* leave n_kv_heads out"):
        decoder(n_kv_heads=4, kv_latent_dim=6)
    with pytest.raises(ValueError, match="rope_dim: only latent attention"):
        decoder(n_kv_heads=2, rope_dim=2)
    with pytest.raises(ValueError, match="n_kv_heads: n_heads = 4 is not divisible"):
        decoder(n_kv_heads=3)
    with pytest.raises(TypeError):
        TinyDecoder(VOCAB, D_MODEL, N_HEADS, 2, 2, MAX_LEN)  # sizes are keyword-only
    model = decoder(kv_latent_dim=6)
    with pytest.raises(ValueError, match=re.escape("caches: expected 2 LatentCache, got 1")):
        model(torch.tensor([[1]]), model.new_caches()[:1])


def test_next_token_loss_of_a_fresh_model_is_near_uniform():
    model = decoder(n_kv_heads=2).eval()
    ids = periodic_ids()
    loss = next_token_loss(model, ids[None, :20], ids[None, 1:21]).item()
    assert abs(loss - math.log(VOCAB)) < 1.0
    assert evaluate_loss(model, ids, 20, max_blocks=4) == pytest.approx(
        next_token_loss(model, ids[:80].view(4, 20), ids[1:81].view(4, 20)).item()
    )


@pytest.mark.parametrize(("variant", "keywords"), VARIANTS[::3])
def test_training_learns_a_periodic_sequence_and_is_reproducible(variant, keywords):
    ids = periodic_ids()
    runs = []
    for _ in range(2):
        model = decoder(**keywords)
        history = train_language_model(
            model,
            ids[:300],
            ids[300:],
            steps=30,
            batch_size=8,
            block_size=16,
            lr=1e-2,
            eval_every=10,
            seed=1,
        )
        runs.append(history)
        assert not model.training
    assert runs[0].steps == [0, 10, 20, 30]
    assert runs[0].validation_losses == runs[1].validation_losses
    assert runs[0].validation_losses[-1] < 0.3 * runs[0].validation_losses[0]
    assert math.isfinite(runs[0].final_training_loss)


def test_a_history_reads_back_from_its_record_whatever_else_the_record_holds():
    history = TrainingHistory([0, 25], [4.2, 3.1], 2.9)
    record = {**dataclasses.asdict(history), "training_seconds": 12.3}
    assert TrainingHistory.from_record(record) == history
