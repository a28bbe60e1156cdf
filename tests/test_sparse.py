"""Attention that picks its keys (attnbook.sparse): every method equals dense attention under the
mask of the keys it picked, in float64; gradients; empty selections; bad input refused."""

import itertools
import math

import pytest
import torch

from attnbook.core.attention import scaled_dot_product_attention
from attnbook.core.heads import repeat_kv
from attnbook.core.masks import causal_mask, sliding_window_mask
from attnbook.models.sparse_models import (
    PROBES,
    WINDOW_PROBES,
    build_sparse_model,
    head_topk_mask,
    heaviest_blocks_mask,
    load_dense_weights,
    set_mode,
    with_choice,
)
from attnbook.sparse.indexer import (
    LightningIndexer,
    dense_target,
    indexer_kl_loss,
    topk_recall,
    topk_tokens,
)
from attnbook.sparse.layers import IndexedSparseAttention, MoBASelfAttention
from attnbook.sparse.moba import moba_attention, moba_blocks, moba_mask
from attnbook.sparse.nsa import NativeSparseAttention, compress, summarised_tokens
from attnbook.sparse.topk import selection_mask, topk_attention

F64 = torch.float64


def qkv(batch=2, heads=4, kv_heads=2, length=10, width=8, value_width=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, width, generator=generator, dtype=F64)
    k = torch.randn(batch, kv_heads, length, width, generator=generator, dtype=F64)
    v = torch.randn(batch, kv_heads, length, value_width, generator=generator, dtype=F64)
    return q, k, v


def random_indices(shape, key_len, seed=0):
    """Distinct keys per row, some slots -1."""
    generator = torch.Generator().manual_seed(seed)
    rows = [
        torch.randperm(key_len + 1, generator=generator)[: shape[-1]] - 1
        for _ in range(math.prod(shape[:-1]))
    ]
    return torch.stack(rows).view(shape)


def dense(q, k, v, mask):
    group = q.size(1) // k.size(1)
    return scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group), mask)[0]


# topk_attention ------------------------------------------------------------------------------


@pytest.mark.parametrize("index_heads", [4, 1])
def test_topk_attention_equals_dense_attention_under_the_selection_mask(index_heads):
    q, k, v = qkv()
    indices = random_indices((2, index_heads, 10, 4), 10)
    assert (indices == -1).any() and (indices >= 0).any()
    expected = dense(q, k, v, selection_mask(indices, 10))
    torch.testing.assert_close(topk_attention(q, k, v, indices), expected, rtol=0, atol=1e-12)


def test_topk_attention_with_every_key_is_dense_attention_and_scale_is_used():
    q, k, v = qkv(kv_heads=4)
    every = torch.arange(10).expand(2, 4, 10, 10)
    expected = scaled_dot_product_attention(q, k, v, scale=0.3)[0]
    torch.testing.assert_close(topk_attention(q, k, v, every, scale=0.3), expected)


def test_topk_attention_gradients_match_dense_attention_under_its_mask():
    q, k, v = qkv()
    indices = random_indices((2, 4, 10, 3), 10, seed=1)
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    topk_attention(*inputs, indices).pow(2).sum().backward()
    reference = [t.clone().requires_grad_() for t in (q, k, v)]
    dense(*reference, selection_mask(indices, 10)).pow(2).sum().backward()
    for got, want in zip(inputs, reference, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=1e-12)
    q, k, v = qkv()
    small = [q[:1, :2, :4].clone().requires_grad_()]
    small += [t[:1, :1].clone().requires_grad_() for t in (k, v)]
    chosen = indices[:1, :2, :4]
    assert torch.autograd.gradcheck(
        lambda a, b, c: topk_attention(a, b, c, chosen), small, fast_mode=True
    )


def test_a_query_with_no_key_gets_zero_output_and_zero_gradients():
    q, k, v = (t.requires_grad_() for t in qkv())
    indices = random_indices((2, 4, 10, 3), 10)
    indices[0, 1, 2] = -1
    out = topk_attention(q, k, v, indices)
    assert torch.equal(out[0, 1, 2], torch.zeros(6, dtype=F64))
    out.sum().backward()
    assert torch.equal(q.grad[0, 1, 2], torch.zeros(8, dtype=F64))
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    nothing = torch.full((2, 4, 10, 2), -1)
    assert torch.equal(topk_attention(q, k, v, nothing), torch.zeros(2, 4, 10, 6, dtype=F64))


def test_a_key_listed_twice_is_refused_with_its_row():
    q, k, v = qkv()
    indices = random_indices((2, 4, 10, 3), 10)
    indices[1, 2, 3] = torch.tensor([5, -1, 5])
    with pytest.raises(ValueError, match=r"indices: row \(b=1, h=2, t=3\) lists a key twice"):
        topk_attention(q, k, v, indices)
    indices[1, 2, 3] = torch.tensor([-1, 5, -1])  # two free slots are fine
    topk_attention(q, k, v, indices)


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        (torch.zeros(2, 4, 10), r"indices: expected shape .* \(4 dims\)"),
        (
            torch.zeros(2, 3, 10, 2, dtype=torch.long),
            r"indices: expected shape .*4 or 1.*\(2, 3, 10, 2\)",
        ),
        (torch.zeros(2, 4, 9, 2, dtype=torch.long), r"indices: expected shape"),
        (torch.zeros(2, 4, 10, 2), r"indices: expected dtype torch.int64"),
        (torch.full((2, 4, 10, 1), 10), r"indices: expected key positions in \[0, S - 1 = 9\].*10"),
        (torch.full((2, 4, 10, 1), -2), r"got values from -2"),
    ],
)
def test_bad_indices_are_refused_by_name(indices, message):
    with pytest.raises(ValueError, match=message):
        topk_attention(*qkv(), indices)


def test_bad_queries_keys_values_are_refused():
    q, k, v = qkv()
    indices = torch.zeros(2, 4, 10, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="k: its H_kv = 3 heads must divide"):
        topk_attention(
            q, torch.zeros(2, 3, 10, 8, dtype=F64), torch.zeros(2, 3, 10, 6, dtype=F64), indices
        )
    with pytest.raises(ValueError, match="v: expected the same"):
        topk_attention(q, k, v[:, :, :9], indices)
    with pytest.raises(ValueError, match="scale"):
        topk_attention(q, k, v, indices, scale=float("nan"))


# MoBA ----------------------------------------------------------------------------------------


def moba_mask_by_loops(q, k, block_size, top_k):
    """MoBA's choice written plainly, one query at a time (H_kv = H)."""
    batch, heads, length, _ = q.shape
    mask = torch.zeros(batch, heads, length, length, dtype=torch.bool)
    for b in range(batch):
        for h in range(heads):
            for t in range(length):
                own = t // block_size
                earlier = [
                    k[b, h, j * block_size : (j + 1) * block_size].mean(0) @ q[b, h, t]
                    for j in range(own)
                ]
                best = sorted(range(own), key=lambda j: -earlier[j])[: top_k - 1]
                for j in [own, *best]:
                    mask[b, h, t, j * block_size : min((j + 1) * block_size, t + 1)] = True
    return mask


@pytest.mark.parametrize(("block_size", "top_k"), [(3, 2), (4, 3), (2, 1), (5, 2)])
def test_moba_mask_matches_a_plain_loop(block_size, top_k):
    q, k, _ = qkv(kv_heads=4, length=11)
    torch.testing.assert_close(
        moba_mask(q, k, block_size=block_size, top_k=top_k),
        moba_mask_by_loops(q, k, block_size, top_k),
    )


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_moba_attention_equals_dense_attention_under_its_mask(kv_heads):
    q, k, v = qkv(kv_heads=kv_heads, length=11)
    mask = moba_mask(q, k, block_size=3, top_k=2)
    assert mask.sum() < causal_mask(11).sum() * 2 * 4  # it does skip keys
    torch.testing.assert_close(
        moba_attention(q, k, v, block_size=3, top_k=2), dense(q, k, v, mask), rtol=0, atol=1e-12
    )


def test_moba_with_every_block_is_causal_attention_and_has_gradients():
    q, k, v = (t.requires_grad_() for t in qkv(kv_heads=4, length=11))
    out = moba_attention(q, k, v, block_size=3, top_k=4)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, is_causal=True)[0])
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0 for t in (q, k, v))


def test_moba_blocks_lists_the_own_block_first_and_none_for_missing_blocks():
    q, k, _ = qkv(length=11)
    blocks = moba_blocks(q, k, block_size=3, top_k=3)  # (B, H, T, 3)
    assert torch.equal(blocks[..., 0], (torch.arange(11) // 3).expand(2, 4, 11))
    assert (blocks[:, :, :3, 1:] == -1).all()  # the first block has nothing earlier


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"block_size": 0, "top_k": 1}, r"block_size: expected a positive int, got 0"),
        ({"block_size": 11, "top_k": 1}, r"block_size: expected an int in \[1, S = 10\].*11"),
        ({"block_size": 3, "top_k": 5}, r"top_k: expected an int in \[1, 4\] \(there are 4 blocks"),
        ({"block_size": 3, "top_k": 0}, r"top_k: expected a positive int, got 0"),
        ({"block_size": 2.0, "top_k": 1}, r"block_size"),
    ],
)
def test_moba_refuses_bad_block_sizes_and_top_k(options, message):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=message):
        moba_attention(q, k, v, **options)
    with pytest.raises(ValueError, match=message):
        moba_mask(q, k, **options)


def test_moba_refuses_keys_that_are_not_the_queries():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"k: causal self-attention needs as many keys as queries"):
        moba_attention(q, k[:, :, :8], v[:, :, :8], block_size=2, top_k=1)


# The lightning indexer -----------------------------------------------------------------------


def test_index_scores_follow_the_formula_and_hide_the_future():
    torch.manual_seed(0)
    indexer = LightningIndexer(12, 3, 4).double()
    x = torch.randn(2, 7, 12, dtype=F64)
    scores = indexer(x)
    q = indexer.q_proj(x).view(2, 7, 3, 4)
    k, w = indexer.k_proj(x), indexer.w_proj(x)
    for t in range(7):
        for s in range(7):
            expected = sum(
                w[:, t, j] * torch.relu(q[:, t, j] @ k[:, s].T).diagonal() / 2 for j in range(3)
            )
            if s <= t:
                torch.testing.assert_close(scores[:, t, s], expected)
            else:
                assert (scores[:, t, s] == float("-inf")).all()


def test_topk_tokens_never_picks_the_future_and_leaves_early_slots_empty():
    scores = torch.randn(2, 6, 6).masked_fill(~causal_mask(6), float("-inf"))
    chosen = topk_tokens(scores, 3)
    assert torch.equal(chosen[:, 0, 1:], torch.full((2, 2), -1))
    assert (chosen <= torch.arange(6)[:, None]).all()
    assert torch.equal(
        selection_mask(chosen[:, None], 6).sum(-1)[:, 0],
        torch.tensor([1, 2, 3, 3, 3, 3]).expand(2, 6),
    )
    with pytest.raises(
        ValueError, match=r"top_k: expected an int in \[1, 6\] \(there are 6 keys\), got 7"
    ):
        topk_tokens(scores, 7)


def test_the_warmup_loss_is_zero_at_the_target_and_positive_elsewhere():
    weights = torch.softmax(torch.randn(2, 3, 5, 5).masked_fill(~causal_mask(5), float("-inf")), -1)
    target = dense_target(weights)
    torch.testing.assert_close(target.sum(-1), torch.ones(2, 5))
    matched = target.log().masked_fill(~causal_mask(5), float("-inf"))
    assert indexer_kl_loss(matched, target).abs() < 1e-6
    other = torch.randn(2, 5, 5).masked_fill(~causal_mask(5), float("-inf")).requires_grad_()
    loss = indexer_kl_loss(other, target)
    assert loss > 0.01
    loss.backward()
    assert torch.isfinite(other.grad).all()
    chosen = causal_mask(5) & (torch.arange(5) >= torch.arange(5)[:, None] - 1)  # self and previous
    restricted = indexer_kl_loss(other, target, chosen.expand(2, 5, 5))
    assert 0 <= restricted < loss


def test_recall_is_one_for_the_dense_top_k_and_lower_for_the_worst():
    weights = torch.softmax(torch.randn(1, 2, 8, 8).masked_fill(~causal_mask(8), float("-inf")), -1)
    target = dense_target(weights)
    assert topk_recall(topk_tokens(target.log(), 3), target, 3).eq(1).all()
    worst = topk_tokens((-target).masked_fill(~causal_mask(8), float("-inf")), 3)
    assert topk_recall(worst, target, 3).mean() < 1
    assert topk_recall(worst, target, 3).numel() == 8 - 3  # queries 0..2 read all their keys


# Layers --------------------------------------------------------------------------------------


def test_the_indexed_layer_equals_topk_attention_over_its_indexers_choice():
    torch.manual_seed(0)
    layer = IndexedSparseAttention(16, 4, top_k=3, indexer_heads=2, indexer_dim=8).double()
    layer.mode = "sparse"
    x = torch.randn(2, 9, 16, dtype=F64)
    out, weights = layer(x, need_weights=True)
    q, k, v = layer._heads(x)
    indices = topk_tokens(layer.indexer(x), 3)[:, None]
    expected = layer.out_proj(topk_attention(q, k, v, indices).transpose(1, 2).reshape(2, 9, 16))
    torch.testing.assert_close(out, expected)
    assert ((weights > 0).sum(-1) <= 3).all()
    assert layer.indexer_loss is not None and layer.indexer_loss >= 0


def test_the_indexed_layer_modes():
    torch.manual_seed(0)
    layer = IndexedSparseAttention(16, 4, top_k=9, indexer_heads=2, indexer_dim=8).double()
    x = torch.randn(2, 9, 16, dtype=F64)
    outputs = {}
    for mode in ("dense", "warmup", "sparse", "exact"):
        layer.mode = mode
        outputs[mode] = layer(x)[0]
    torch.testing.assert_close(outputs["sparse"], outputs["dense"])  # top 9 of 9 = every key
    torch.testing.assert_close(outputs["warmup"], outputs["dense"])
    torch.testing.assert_close(outputs["exact"], outputs["dense"])
    layer.mode = "fast"
    with pytest.raises(ValueError, match="mode: expected one of"):
        layer(x)


def test_the_exact_mode_reads_the_dense_attentions_own_top_k():
    torch.manual_seed(0)
    layer = IndexedSparseAttention(16, 4, top_k=3, indexer_heads=2, indexer_dim=8).double()
    x = torch.randn(2, 9, 16, dtype=F64)
    q, k, v = layer._heads(x)
    dense = scaled_dot_product_attention(q, k, v, is_causal=True)[1]  # (B, H, T, S)
    best = dense.sum(1).masked_fill(~causal_mask(9), float("-inf"))  # (B, T, S)
    indices = topk_tokens(best, 3)[:, None]  # (B, 1, T, 3)
    expected = layer.out_proj(topk_attention(q, k, v, indices).transpose(1, 2).reshape(2, 9, 16))
    layer.mode = "exact"
    torch.testing.assert_close(layer(x)[0], expected)
    assert layer.indexer_loss is None


def test_dense_weights_load_into_the_indexer_model_whole():
    torch.manual_seed(0)
    dense = build_sparse_model("dense").eval()
    indexed = build_sparse_model("indexer").eval()
    tokens = torch.randint(0, 65, (3, 33))
    assert not torch.allclose(indexed(tokens), dense(tokens))
    load_dense_weights(indexed, dense.state_dict())
    torch.testing.assert_close(indexed(tokens), dense(tokens))  # dense mode
    # what the first version did: strict=False dropped every attention weight in silence
    result = build_sparse_model("indexer").load_state_dict(dense.state_dict(), strict=False)
    assert any(".attention.q_proj" in key for key in result.unexpected_keys)
    with pytest.raises(ValueError, match="dense_state: expected .* unexpected"):
        load_dense_weights(indexed, {**dense.state_dict(), "extra": torch.zeros(1)})
    state = {k: v for k, v in dense.state_dict().items() if "v_proj" not in k}
    with pytest.raises(ValueError, match="missing .*v_proj"):
        load_dense_weights(indexed, state)


def test_dense_weights_load_into_the_moba_model_whole():
    # MoBA from dense weights (scripts/train_sparse_models.py --moba-from-dense): with every
    # block chosen it must score exactly what the dense model scores
    torch.manual_seed(0)
    dense = build_sparse_model("dense").eval()
    moba = build_sparse_model("moba").eval()
    load_dense_weights(moba, dense.state_dict())
    tokens = torch.randint(0, 65, (3, 33))
    assert not torch.allclose(moba(tokens), dense(tokens))  # top 2 blocks of 2
    for block in moba.blocks:
        block.attention.inner.top_k = 17
    torch.testing.assert_close(moba(tokens), dense(tokens))


def test_with_choice_reproduces_the_dense_moba_and_exact_models():
    # the probe must be the model it claims: causal = dense, MoBA's rule = the MoBA layer with
    # the dense weights, the shared top 4 = the indexer model's "exact" mode
    torch.manual_seed(0)
    dense = build_sparse_model("dense").eval()
    tokens = torch.randint(0, 65, (3, 33))
    causal = with_choice(dense, lambda q, k, w: causal_mask(q.size(2)))
    torch.testing.assert_close(causal(tokens), dense(tokens))
    moba = build_sparse_model("moba").eval()
    load_dense_weights(moba, dense.state_dict())
    probe = with_choice(dense, lambda q, k, w: moba_mask(q, k, block_size=2, top_k=2))
    torch.testing.assert_close(probe(tokens), moba(tokens))
    exact = build_sparse_model("indexer").eval()
    load_dense_weights(exact, dense.state_dict())
    set_mode(exact, "exact")
    shared = with_choice(
        dense, lambda q, k, w: selection_mask(topk_tokens(dense_target(w).log(), 4)[:, None], 33)
    )
    torch.testing.assert_close(shared(tokens), exact(tokens))
    assert not torch.allclose(probe(tokens), dense(tokens))
    single = with_choice(dense, PROBES["MoBA: blocks of 1, q . k"])
    moba_single = build_sparse_model("moba").eval()
    load_dense_weights(moba_single, dense.state_dict())
    for block in moba_single.blocks:
        block.attention.inner.block_size, block.attention.inner.top_k = 1, 4
    torch.testing.assert_close(single(tokens), moba_single(tokens))
    with pytest.raises(ValueError, match="choose: expected a callable, got int"):
        with_choice(dense, 3)


@pytest.mark.parametrize("block_size, top_k", [(2, 2), (3, 2), (2, 3), (4, 1)])
def test_heaviest_blocks_mask_matches_a_plain_loop(block_size, top_k):
    torch.manual_seed(block_size + top_k)
    scores = torch.randn(2, 3, 11, 11, dtype=F64)
    weights = scores.masked_fill(~causal_mask(11), float("-inf")).softmax(-1)
    mask = heaviest_blocks_mask(weights, block_size=block_size, top_k=top_k)
    for b, h, t in itertools.product(range(2), range(3), range(11)):
        own = t // block_size
        mass = [weights[b, h, t, j * block_size : (j + 1) * block_size].sum() for j in range(own)]
        best = sorted(range(own), key=lambda j: -mass[j])[: top_k - 1]
        expected = [s for s in range(t + 1) if s // block_size in [own, *best]]
        assert mask[b, h, t].nonzero().flatten().tolist() == expected


def test_window_probes_add_the_last_two_keys_to_a_block_rule_within_four_keys():
    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 3, 11, 8, dtype=F64)
    weights = (q @ k.transpose(-2, -1)).masked_fill(~causal_mask(11), float("-inf")).softmax(-1)
    rules = {
        "window 2 + MoBA: blocks of 2, q . mean key": moba_mask(q, k, block_size=2, top_k=2),
        "window 2 + blocks of 2, heaviest block": heaviest_blocks_mask(
            weights, block_size=2, top_k=2
        ),
    }
    assert list(WINDOW_PROBES) == list(rules)
    for name, blocks in rules.items():
        mask = WINDOW_PROBES[name](q, k, weights)  # (B, H, T, S)
        for b, h, t in itertools.product(range(2), range(3), range(11)):
            read = set(mask[b, h, t].nonzero().flatten().tolist())
            picked = set(blocks[b, h, t].nonzero().flatten().tolist())
            assert read == picked | {t, max(t - 1, 0)}
            assert len(read) <= 4
        assert not (mask & ~causal_mask(11)).any()
        assert not torch.equal(mask, blocks)  # the window adds keys somewhere


def test_head_topk_mask_reads_each_heads_heaviest_keys_causally():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 9, 9, dtype=F64)
    weights = scores.masked_fill(~causal_mask(9), float("-inf")).softmax(-1)
    mask = head_topk_mask(weights, 4)
    assert not (mask & ~causal_mask(9)).any()
    assert mask.sum(-1).tolist() == [[[min(t + 1, 4) for t in range(9)]] * 3] * 2
    lightest_read = weights.masked_fill(~mask, float("inf")).amin(-1)  # (B, H, T)
    heaviest_unread = weights.masked_fill(mask, 0.0).amax(-1)  # (B, H, T)
    assert (lightest_read > heaviest_unread).all()


def test_the_moba_layer_equals_moba_attention():
    torch.manual_seed(0)
    layer = MoBASelfAttention(16, 4, block_size=3, top_k=2).double()
    x = torch.randn(2, 9, 16, dtype=F64)
    q, k, v = layer._heads(x)
    heads = moba_attention(q, k, v, block_size=3, top_k=2)
    torch.testing.assert_close(layer(x)[0], layer.out_proj(heads.transpose(1, 2).reshape(2, 9, 16)))


# NSA -----------------------------------------------------------------------------------------


def nsa_and_input(top_n=2, window=3, seed=0):
    torch.manual_seed(seed)
    module = NativeSparseAttention(16, 2, block_size=4, top_n=top_n, window=window).double()
    with torch.no_grad():
        module.position_weights.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64))
    return module, torch.randn(2, 13, 16, dtype=F64)


def test_each_nsa_branch_equals_dense_attention_under_its_mask():
    module, x = nsa_and_input()
    outputs, gates, masks = module.branches(x)
    q, k, v = split(module, x)
    torch.testing.assert_close(
        outputs["selected"], dense(q, k, v, masks["selected"]), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        outputs["sliding"], dense(q, k, v, sliding_window_mask(13, 3)), rtol=0, atol=1e-12
    )
    assert torch.equal(masks["sliding"][0, 0], sliding_window_mask(13, 3))
    # compressed: summaries written out by hand, attended under "block complete"
    weights = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    k_cmp = torch.stack(
        [(k[:, :, 4 * j : 4 * j + 4] * weights[:, None]).sum(2) for j in range(3)], 2
    )
    v_cmp = torch.stack(
        [(v[:, :, 4 * j : 4 * j + 4] * weights[:, None]).sum(2) for j in range(3)], 2
    )
    torch.testing.assert_close(compress(k, 4, module.position_weights), k_cmp)
    visible = torch.tensor([[4 * j + 3 <= t for j in range(3)] for t in range(13)])
    torch.testing.assert_close(
        outputs["compressed"], dense(q, k_cmp, v_cmp, visible), rtol=0, atol=1e-12
    )
    assert torch.equal(
        outputs["compressed"][:, :, :3], torch.zeros(2, 2, 3, 8, dtype=F64)
    )  # no block yet
    assert torch.equal(masks["compressed"][0, 0], summarised_tokens(13, 4))
    assert ((gates > 0) & (gates < 1)).all()


def test_compress_weighs_each_position_of_each_block_with_random_weights():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 11, 5, generator=generator, dtype=F64)  # 2 complete blocks of 4
    weights = torch.rand(4, generator=generator, dtype=F64)
    by_hand = torch.zeros(2, 3, 2, 5, dtype=F64)
    for j in range(2):
        for p in range(4):
            by_hand[:, :, j] += weights[p] * x[:, :, 4 * j + p]
    torch.testing.assert_close(compress(x, 4, weights), by_hand, rtol=0, atol=1e-12)


def test_nsa_selects_the_blocks_its_compressed_branch_weighs_most():
    module, x = nsa_and_input()
    _, _, masks = module.branches(x)
    q, k, v = split(module, x)
    k_cmp = compress(k, 4, module.position_weights)
    weights = scaled_dot_product_attention(
        q, k_cmp, k_cmp, torch.tensor([[4 * j + 3 <= t for j in range(3)] for t in range(13)])
    )[1]
    score = weights.sum(1)  # (B, T, 3)
    t = 12  # own block 3; best earlier block by the summed weights
    best = score[:, t].argmax(-1)
    for b in range(2):
        expected = torch.zeros(13, dtype=torch.bool)
        expected[4 * best[b] : 4 * best[b] + 4] = True
        expected[12] = True
        assert torch.equal(masks["selected"][b, 0, t], expected)


def test_nsa_with_every_block_selected_reads_causally_and_has_gradients():
    module, x = nsa_and_input(top_n=4)
    x.requires_grad_()
    outputs, _, masks = module.branches(x)
    assert torch.equal(masks["selected"][0, 0], causal_mask(13))
    module(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"block_size": 14, "top_n": 1, "window": 2},
            r"block_size: expected an int in \[1, S = 13\]",
        ),
        ({"block_size": 4, "top_n": 5, "window": 2}, r"top_n: expected an int in \[1, 4\]"),
        ({"block_size": 4, "top_n": 1, "window": 0}, r"window: expected a positive int"),
    ],
)
def test_nsa_refuses_bad_sizes(options, message):
    with pytest.raises(ValueError, match=message):
        NativeSparseAttention(16, 2, **options)(torch.randn(1, 13, 16))


def split(module, x):
    from attnbook.core.heads import split_heads

    return tuple(
        split_heads(p(x), module.n_heads) for p in (module.q_proj, module.k_proj, module.v_proj)
    )


def test_the_shipped_manifest_holds_both_controls_for_every_seed():
    import json
    from pathlib import Path

    manifest = json.loads((Path(__file__).parent.parent / "data/sparse_models.json").read_text())
    for seed in manifest["seeds"]:
        run = manifest["runs"][f"seed{seed}"]
        for curve, summary in [
            ("dense_control", "dense_plus_sparse_steps"),
            ("moba_from_dense",) * 2,
        ]:
            assert run["curves"][curve]["steps"][-1] == manifest["steps"]["sparse"]
            assert run["curves"][curve]["metrics"][-1] == run["summary"][summary]
