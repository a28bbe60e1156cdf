"""The tiny decoder-only model, greedy generation with and without a cache, and its benchmark."""

import re

import pytest
import torch

from attnbook import TinyDecoder, greedy_generate, kv_cache_bytes_per_token, trace_shapes
from attnbook.bench import decoding

VOCAB, D_MODEL, N_HEADS, N_LAYERS, MAX_LEN = 50, 32, 4, 2, 40


def model(n_kv_heads=N_HEADS):
    torch.manual_seed(0)
    sizes = {"d_model": D_MODEL, "n_heads": N_HEADS, "n_layers": N_LAYERS, "max_len": MAX_LEN}
    return TinyDecoder(VOCAB, n_kv_heads=n_kv_heads, **sizes).eval()


def prompt(batch=2, length=5):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


def test_forward_shapes_and_trace():
    with trace_shapes() as trace:
        logits = model()(prompt())
    assert logits.shape == (2, 5, VOCAB)
    assert trace["embedded"] == (2, 5, D_MODEL) and trace["logits"] == (2, 5, VOCAB)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cached_and_recomputed_generation_agree(n_kv_heads):
    decoder = model(n_kv_heads)
    cached_tokens, cached_logits = greedy_generate(decoder, prompt(), 12, use_cache=True)
    full_tokens, full_logits = greedy_generate(decoder, prompt(), 12, use_cache=False)
    assert cached_tokens.shape == (2, 17) and cached_logits.shape == (2, 12, VOCAB)
    assert torch.equal(cached_tokens, full_tokens)
    assert torch.equal(cached_tokens[:, :5], prompt())
    torch.testing.assert_close(cached_logits, full_logits)


def test_a_chunk_on_top_of_a_cache_matches_the_full_forward():
    decoder = model(2)
    tokens = prompt(length=9)
    with torch.no_grad():
        full = decoder(tokens)  # (B, T, V)
        caches = decoder.new_caches()
        decoder(tokens[:, :6], caches)
        chunk = decoder(tokens[:, 6:], caches)  # (B, 3, V)
    torch.testing.assert_close(chunk, full[:, 6:])


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cache_size_follows_the_formula(n_kv_heads):
    decoder = model(n_kv_heads)
    caches = decoder.new_caches()
    with torch.no_grad():
        decoder(prompt(batch=1, length=7), caches)
    measured = sum(cache.nbytes for cache in caches)
    per_token = kv_cache_bytes_per_token(N_LAYERS, n_kv_heads, D_MODEL // N_HEADS, torch.float32)
    assert measured == 7 * per_token


def test_errors():
    decoder = model()
    greedy_generate(decoder, prompt(length=30), 11)  # 40 positions: the last is never fed
    with pytest.raises(ValueError, match=re.escape("need 41 positions, more than max_len = 40")):
        greedy_generate(decoder, prompt(length=30), 12)
    caches = decoder.new_caches()
    with torch.no_grad():
        decoder(prompt(length=38), caches)
        with pytest.raises(ValueError, match=re.escape("38 cached + 3 new positions exceed")):
            decoder(prompt(length=3), caches)
    with pytest.raises(ValueError, match="expected integer token ids"):
        decoder(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=re.escape("caches: expected 2 KVCache, got 1")):
        decoder(prompt(), decoder.new_caches()[:1])
    with pytest.raises(ValueError, match="n_new: expected a positive int"):
        greedy_generate(decoder, prompt(), 0)
    with pytest.raises(ValueError, match="n_layers: expected a positive int"):
        TinyDecoder(VOCAB, d_model=D_MODEL, n_heads=N_HEADS, n_layers=0, max_len=MAX_LEN)


def test_benchmark_restores_the_thread_count_and_formats_a_table():
    threads = torch.get_num_threads()
    results = decoding.decode_benchmark(lengths=(16,), repeats=1, kv_heads={"MHA": 8}, n_threads=2)
    assert torch.get_num_threads() == threads
    lines = decoding.format_results(results).splitlines()
    assert "speedup" in lines[1] and lines[2].startswith("MHA")
    assert lines[2].split()[-1] == "True"  # same tokens with and without the cache
    assert lines[-1].endswith(": not measured")  # 16 tokens only: no growth to measure


def test_format_results_says_whether_the_target_is_met():
    short = decoding.DecodeResult("MHA", 8, 64, cached_s=0.1, recomputed_s=0.3, same_tokens=True)
    fast = decoding.DecodeResult("MHA", 8, 256, cached_s=0.1, recomputed_s=1.0, same_tokens=True)
    slow = decoding.DecodeResult("MHA", 8, 256, cached_s=0.3, recomputed_s=1.0, same_tokens=True)
    assert decoding.format_results([short, fast]).endswith(": met (MHA 3.3x)")
    assert decoding.format_results([short, slow]).endswith(": NOT met (MHA 1.1x)")
    assert fast.speedup == pytest.approx(10.0)


@pytest.mark.parametrize(
    "dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32]
)
def test_token_ids_of_any_integer_dtype_give_the_int64_logits(dtype):
    torch.manual_seed(0)
    model = TinyDecoder(16, d_model=16, n_heads=2, n_layers=1, max_len=8).eval()
    tokens = torch.tensor([[0, 3, 15, 7], [1, 2, 3, 4]])  # (B, T) int64
    expected = model(tokens)
    torch.testing.assert_close(model(tokens.to(dtype)), expected, rtol=0, atol=0)
    torch.testing.assert_close(
        model.attention_weights(tokens.to(dtype)), model.attention_weights(tokens)
    )
    generated, _ = greedy_generate(model, tokens.to(dtype), 2)
    assert torch.equal(generated, greedy_generate(model, tokens, 2)[0])
    with pytest.raises(
        ValueError,
        match=r"tokens: expected ids in \[0, vocab_size = 16\), got "
        r"values from 0 to 16",
    ):
        model(torch.tensor([[0, 16]]).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool, torch.complex64])
def test_token_ids_that_are_not_integers_are_refused(dtype):
    model = TinyDecoder(16, d_model=16, n_heads=2, n_layers=1, max_len=8)
    with pytest.raises(ValueError, match=f"tokens: expected integer token ids, got dtype {dtype}"):
        model(torch.zeros(1, 3, dtype=dtype))


def test_a_block_equals_torchs_pre_norm_encoder_layer_with_a_causal_mask():
    """DecoderBlock against nn.TransformerEncoderLayer(norm_first=True), weights copied.

    An independent reference for chapter 12's block: PyTorch's layer, given a causal mask, in
    float64 with training-mode dropout off; a non-causal run must differ (the test can fail).
    """
    block = model().double().blocks[0]
    with torch.no_grad():
        for parameter in block.parameters():  # not LayerNorm's default ones and zeros
            parameter.add_(0.1 * torch.randn_like(parameter))
    attention = block.attention
    reference = torch.nn.TransformerEncoderLayer(
        D_MODEL, N_HEADS, 4 * D_MODEL, 0.0, "gelu", batch_first=True, norm_first=True
    ).double()
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    with torch.no_grad():
        reference.self_attn.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        reference.self_attn.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
    for theirs, ours in [
        (reference.self_attn.out_proj, attention.out_proj),
        (reference.norm1, block.attention_norm),
        (reference.linear1, block.mlp[0]),
        (reference.linear2, block.mlp[2]),
        (reference.norm2, block.mlp_norm),
    ]:
        theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 9, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(9, dtype=torch.float64)
    with torch.no_grad():
        ours = block(x)  # (B, T, D)
        theirs = reference(x, src_mask=causal, is_causal=True)  # (B, T, D)
        unmasked = reference(x)  # (B, T, D)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(ours[:, :-1], unmasked[:, :-1], atol=1e-6)
    torch.testing.assert_close(ours[:, -1], unmasked[:, -1], rtol=1e-12, atol=1e-12)
