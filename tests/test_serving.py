"""Chapter 17's serving library: the paged cache, paged attention, continuous batching."""

import pytest
import torch

from attnbook.core.kv_cache import KVCache
from attnbook.layers.multihead import GroupedQueryAttention
from attnbook.models.decoder import TinyDecoder, greedy_generate
from attnbook.serving import (
    CacheFullError,
    PagedKVCache,
    PrefixTable,
    QuantizedKV,
    ServingEngine,
    attention_error,
    block_hashes,
    paged_attention,
    paged_forward,
    quantize,
    serve,
)

VOCAB = 23


def make_model(positions: str = "learned", n_kv_heads: int = 2) -> TinyDecoder:
    torch.manual_seed(0)
    model = TinyDecoder(
        VOCAB,
        d_model=16,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        n_layers=2,
        max_len=64,
        positions=positions,
    )
    return model.double().eval()


def random_requests(n: int, seed: int) -> tuple[list[list[int]], list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 20, (n,), generator=generator).tolist()
    prompts = [torch.randint(0, VOCAB, (t,), generator=generator).tolist() for t in lengths]
    prompts.append(prompts[0][:3] + [1] * 17)  # two prompts sharing 20 tokens
    prompts.append(prompts[0][:3] + [1] * 17 + [2])
    counts = torch.randint(1, 10, (len(prompts),), generator=generator).tolist()
    return prompts, counts


def alone(model: TinyDecoder, prompts: list[list[int]], counts: list[int]) -> list[list[int]]:
    return [
        greedy_generate(model, torch.tensor([p]), n)[0][0, len(p) :].tolist()
        for p, n in zip(prompts, counts, strict=True)
    ]


def test_paged_attention_equals_contiguous_cache():
    torch.manual_seed(1)
    layer = GroupedQueryAttention(16, 4, 2).double()
    for block_size in (1, 3, 64):
        cache = PagedKVCache(40, block_size, 1, 2, 4, dtype=torch.float64)
        for seq_id, length in enumerate((5, 11, 2)):
            x = torch.randn(1, length, 16, dtype=torch.float64)
            contiguous = KVCache()
            expected, _ = layer(x, is_causal=True, cache=contiguous)  # (1, T, D)
            cache.add_sequence(seq_id)
            cache.reserve(seq_id, length)
            positions = torch.arange(length)
            blocks, offsets = cache.slots(seq_id, positions)
            cache.write(0, blocks[None], offsets[None], contiguous.keys, contiguous.values)
            q = layer.q_proj(x).view(1, length, 4, 4).transpose(1, 2)  # (1, H, T, d_head)
            heads = paged_attention(q, cache, 0, cache.table_tensor([seq_id]), positions[None])
            got = layer.out_proj(heads.transpose(1, 2).reshape(1, length, 16))
            torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("positions", ["learned", "rope", "sinusoidal"])
def test_paged_forward_equals_full_forward(positions):
    model = make_model(positions)
    tokens = torch.randint(0, VOCAB, (1, 13))
    cache = PagedKVCache(8, 4, 2, 2, 4, dtype=torch.float64)
    cache.add_sequence("a")
    cache.reserve("a", 13)
    got = paged_forward(model, tokens, torch.arange(13)[None], cache, ["a"])
    torch.testing.assert_close(got, model(tokens))


@pytest.mark.parametrize("block_size", [1, 4, 64])
def test_serve_equals_greedy_generate_and_frees_everything(block_size):
    model = make_model()
    prompts, counts = random_requests(5, seed=block_size)
    engine = ServingEngine(model, block_size=block_size, max_batch=3)
    assert engine.run(prompts, counts) == alone(model, prompts, counts)
    assert engine.cache.n_free_blocks == engine.cache.n_blocks
    assert engine.cache.n_used_blocks == 0
    assert sum(engine.cache.ref_counts) == 0 and not engine.cache.block_tables
    assert len(engine.prefixes) == 0
    if block_size < 20:
        assert engine.stats.shared_tokens >= block_size  # the common prefix was reused


def test_serve_with_rope_gqa_and_a_tight_pool_preempts_and_still_matches():
    model = make_model("rope", n_kv_heads=1)
    prompts, counts = random_requests(5, seed=3)
    engine = ServingEngine(model, block_size=4, n_blocks=7, max_batch=4)
    assert engine.run(prompts, counts) == alone(model, prompts, counts)
    assert engine.stats.preemptions > 0
    assert engine.cache.n_used_blocks == 0
    # a preempted request's pending token, if a decode step chose it, is marked not kept
    rows = [flag for step in engine.stats.schedule for flag in step.values()]
    dropped = rows.count(False)
    assert 0 < dropped <= engine.stats.preemptions
    # every output token came from a kept decode row or from a prefill whose token survived
    assert sum(counts) - rows.count(True) == len(prompts) + dropped


def test_static_batching_gives_the_same_tokens_in_more_steps_and_records_its_padding():
    model = make_model()
    prompts, counts = random_requests(5, seed=5)
    static = ServingEngine(model, block_size=4, max_batch=4, static=True)
    continuous = ServingEngine(model, block_size=4, max_batch=4)
    assert static.run(prompts, counts) == continuous.run(prompts, counts)
    assert static.stats.steps > continuous.stats.steps
    for engine in (static, continuous):
        schedule = engine.stats.schedule
        assert [len(rows) for rows in schedule] == engine.stats.batch_sizes
        kept = [sum(rows.get(r, False) for rows in schedule) for r in range(len(prompts))]
        assert kept == [c - 1 for c in counts]  # the first token comes from the prefill
    assert all(all(rows.values()) for rows in continuous.stats.schedule)
    schedule = static.stats.schedule
    assert any(not flag for rows in schedule for flag in rows.values())
    for before, after in zip(schedule, schedule[1:], strict=False):
        assert set(before) == set(after) or not set(before) & set(after)  # whole batches
        # a row that stops being kept stays padding until its batch ends
        assert not any(not before[r] and after.get(r) for r in before)


def test_static_batching_refuses_rows_padded_past_the_model_length():
    model = make_model()  # learned positions: no position past max_len exists
    long_prompt, short_prompt = [1] * (model.max_len - 4), [2] * 2
    engine = ServingEngine(model, block_size=4, max_batch=2, static=True)
    with pytest.raises(ValueError, match=r"max_new_tokens: static batching.*max_len"):
        engine.run([long_prompt, short_prompt], [2, model.max_len - 2])
    # each request alone fits, and continuous batching serves them
    ServingEngine(model, block_size=4, max_batch=2).run([long_prompt, short_prompt], [2, 4])


def test_serve_function_and_no_sharing():
    model = make_model()
    prompts, counts = random_requests(4, seed=7)
    assert serve(model, prompts, counts, share_prefixes=False) == alone(model, prompts, counts)


def test_pool_exhaustion_raises_and_changes_nothing():
    cache = PagedKVCache(3, 2, 1, 1, 2)
    cache.add_sequence(0)
    cache.reserve(0, 5)
    assert cache.n_used_blocks == 3 and cache.n_free_blocks == 0
    cache.add_sequence(1)
    with pytest.raises(CacheFullError, match="needs 1 more"):
        cache.reserve(1, 1)
    assert cache.block_tables[1] == [] and cache.lengths[1] == 0 and cache.n_free_blocks == 0
    cache.free(0)
    cache.free(1)
    assert cache.n_free_blocks == 3 and sum(cache.ref_counts) == 0


def test_copy_on_write_after_fork():
    cache = PagedKVCache(6, 4, 1, 1, 2)
    cache.add_sequence("parent")
    cache.reserve("parent", 6)  # blocks 0 (full) and 1 (half full)
    cache.keys[0, 1] = 7.0
    cache.fork("parent", "child")
    assert cache.ref_counts[:2] == [2, 2]
    cache.reserve("child", 1)  # writing into the shared half-full block copies it
    child_last = cache.block_tables["child"][1]
    assert child_last != 1 and cache.ref_counts[1] == 1 and cache.ref_counts[child_last] == 1
    assert torch.equal(cache.keys[0, child_last], cache.keys[0, 1])
    assert cache.block_tables["child"][0] == cache.block_tables["parent"][0] == 0
    assert cache.free("parent") == [1]  # block 0 is still the child's
    assert sorted(cache.free("child")) == sorted([0, child_last])
    assert cache.n_free_blocks == 6


def test_block_hashes_name_a_block_with_its_prefix():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7], 2)
    b = block_hashes([1, 2, 3, 4, 9, 9], 2)
    c = block_hashes([0, 2, 3, 4], 2)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert c[1] != a[1]  # same tokens in block 1, different prefix
    table = PrefixTable()
    table.register(a, [5, 6, 7])
    assert table.longest_prefix(b) == [5, 6]
    table.forget([6])
    assert table.longest_prefix(b) == [5]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"block_size": 0}, "block_size"),
        ({"max_batch": 0}, "max_batch"),
        ({"n_blocks": 1}, "n_blocks"),
        ({"share_prefixes": 1}, "share_prefixes"),
    ],
)
def test_serve_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        serve(make_model(), [[1, 2, 3] * 5], 10, **kwargs)


@pytest.mark.parametrize(
    ("prompts", "count", "name"),
    [
        ([], 3, "prompts"),
        ([[1, VOCAB]], 3, "prompts"),
        ([[]], 3, "prompts"),
        ([[1]], 0, "max_new_tokens"),
        ([[1]], [1, 2], "max_new_tokens"),
        ([[1] * 60], 10, "max_new_tokens"),
    ],
)
def test_serve_bad_requests_name_themselves(prompts, count, name):
    with pytest.raises(ValueError, match=name):
        serve(make_model(), prompts, count)


def test_serve_refuses_latent_attention():
    model = TinyDecoder(VOCAB, d_model=16, n_heads=2, n_layers=1, max_len=8, kv_latent_dim=4)
    with pytest.raises(ValueError, match="model"):
        serve(model, [[1]], 1)


def test_paged_cache_bad_arguments():
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(4, 0, 1, 1, 2)
    with pytest.raises(ValueError, match="dtype"):
        PagedKVCache(4, 2, 1, 1, 2, dtype=torch.int8)
    cache = PagedKVCache(4, 2, 1, 1, 2)
    with pytest.raises(ValueError, match="seq_id"):
        cache.reserve("missing", 1)
    with pytest.raises(ValueError, match="shared_blocks"):
        cache.add_sequence(0, [3])


def test_embed_at_matches_forward_positions_and_checks():
    model = make_model("sinusoidal")
    tokens = torch.randint(0, VOCAB, (2, 5))
    positions = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]])
    row = model.embed_at(tokens[:1], positions[:1])
    shifted = model.embed_at(tokens[:1], positions[1:])
    assert not torch.allclose(row, shifted)
    learned = make_model("learned")
    with pytest.raises(ValueError, match="positions"):
        learned.embed_at(tokens, positions + 60)
    with pytest.raises(ValueError, match="positions"):
        learned.embed_at(tokens, positions[:, :2])


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("dim", [-2, -1])
def test_quantize_reads_back_within_half_a_step_on_its_levels(bits, dim):
    x = torch.randn(
        2, 3, 10, 16, generator=torch.Generator().manual_seed(bits), dtype=torch.float64
    )
    stored = quantize(x, dim, bits)
    step = (x.amax(dim, keepdim=True) - x.amin(dim, keepdim=True)) / (2**bits - 1)
    assert torch.allclose(stored.scale, step)
    assert (stored.dequantize() - x).abs().le(step / 2 + 1e-12).all()
    assert stored.codes.dtype == torch.int8
    assert int(stored.codes.min()) == -128 and int(stored.codes.max()) == 2**bits - 129
    # the extremes of every slice are read back exactly
    assert torch.allclose(stored.dequantize().amax(dim), x.amax(dim))


def test_quantized_bytes_pack_the_codes():
    keys = torch.randn(1, 2, 60, 16)
    values = torch.randn(1, 2, 60, 16)
    scales = 4 * (2 * 16 + 2 * 60)  # float32 (scale, zero): per key channel, per value token
    assert QuantizedKV.from_float(keys, values).nbytes == 2 * 1920 + 2 * scales
    assert QuantizedKV.from_float(keys, values, bits=2).nbytes == 2 * 480 + 2 * scales


def test_attention_error_grows_as_bits_shrink_and_kivi_split_wins_on_an_outlier_channel():
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 3, 16, generator=generator, dtype=torch.float64)
    keys = torch.randn(1, 2, 40, 16, generator=generator, dtype=torch.float64)
    values = torch.randn(1, 2, 40, 16, generator=generator, dtype=torch.float64)
    errors = [attention_error(q, keys, values, bits=b) for b in (8, 4, 2)]
    assert 0 < errors[0] < errors[1] < errors[2]
    assert errors[0] < 0.01
    keys[..., 3] *= 20  # one channel far larger for every token
    per_channel = attention_error(q, keys, values)
    per_token = attention_error(q, keys, values, key_dim=-1)
    assert per_token > 2 * per_channel


@pytest.mark.parametrize("bits", [1, 9, 8.0, True])
def test_quantize_refuses_bad_bits(bits):
    with pytest.raises(ValueError, match=r"bits: expected an int in \[2, 8\]"):
        quantize(torch.randn(2, 4), -1, bits)
    with pytest.raises(ValueError, match="bits"):
        QuantizedKV.from_float(torch.randn(1, 1, 4, 2), torch.randn(1, 1, 4, 2), bits=bits)
