"""Chapter 19's exercise checkers: MoBA's choice of blocks, an indexer's recall and the cache
length at which the indexer costs more than the attention it serves."""

from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _check_bool_mask,
    _checker,
    _close,
    _fail,
    _first_difference,
    _generator,
    _succeed,
)
from attnbook.sparse.cost import ATTENTION_FLOPS, LATENT_BYTES
from attnbook.sparse.indexer import topk_recall, topk_tokens
from attnbook.sparse.moba import moba_mask

# Chapter 19: attention that picks its keys.


def _choice_with_future_blocks(q: Tensor, k: Tensor, block_size: int, top_k: int) -> Tensor:
    """MoBA's (T, T) mask had future blocks competed for the top_k slots (then masked causally)."""
    length = q.size(0)
    n_blocks = -(-length // block_size)
    # (n_blocks, d): each block's mean key
    means = torch.stack([k[j * block_size : (j + 1) * block_size].mean(0) for j in range(n_blocks)])
    block_of = torch.arange(length) // block_size  # (T,)
    own = torch.arange(n_blocks) == block_of[:, None]  # (T, n_blocks)
    scores = (q @ means.T).masked_fill(own, float("inf"))  # (T, n_blocks)
    best = scores.topk(min(top_k, n_blocks), dim=-1).indices  # (T, top_k)
    chosen = torch.zeros(length, n_blocks, dtype=torch.bool).scatter_(1, best, True)
    return chosen[:, block_of] & torch.ones(length, length, dtype=torch.bool).tril()


def _moba_one_head(q: Tensor, k: Tensor, block_size: int, top_k: int) -> Tensor:
    """MoBA's (T, T) mask for one head's (T, d) queries and keys."""
    return moba_mask(q[None, None], k[None, None], block_size=block_size, top_k=top_k)[0, 0]


@_checker
def check_moba_choice(fn: Callable[[Tensor, Tensor, int, int], Tensor]) -> None:
    """``fn(q (T, d), k (T, d), block_size, top_k)`` -> MoBA's (T, T) mask for one head."""
    generator = _generator(0)
    for length, block_size, top_k in [(12, 3, 2), (10, 4, 2), (9, 2, 3), (8, 8, 1)]:
        q = torch.randn(length, 4, generator=generator, dtype=torch.float64)
        k = torch.randn(length, 4, generator=generator, dtype=torch.float64)
        call = f"moba_choice(q ({length}, 4), k ({length}, 4), {block_size}, {top_k})"
        result = _call(fn, call, q.clone(), k.clone(), block_size, top_k)
        mask = _check_bool_mask(result, call, (length, length))
        expected = _moba_one_head(q, k, block_size, top_k)
        if torch.equal(mask, expected):
            continue
        positions = torch.arange(length)
        same_block = (positions[:, None] // block_size) == (positions[None] // block_size)
        own = same_block & (positions[None] <= positions[:, None])  # (T, T)
        if (own & ~mask).any():
            row, key = (own & ~mask).nonzero()[0].tolist()
            _fail(f"{call}: row {row} must read its own block up to itself (key {key})")
        row, key = _first_difference(mask, expected)
        if mask[row, key] and key > row and same_block[row, key]:
            _fail(
                f"{call}: row {row} reads key {key}, later in its own block; inside the own "
                "block a query reads keys up to itself only (the causal mask applies there too)"
            )
        if mask[row, key] and key > row:
            _fail(
                f"{call}: row {row} reads key {key}, which is in its future; a future block "
                "must score -inf before the top-k"
            )
        reads = mask[row].sum().item()
        if mask[row, key] and reads > expected[row].sum().item():
            _fail(f"{call}: row {row} reads too many blocks: top_k = {top_k} counts its own block")
        if top_k > 1 and torch.equal(mask, _moba_one_head(q, k, block_size, top_k - 1)):
            _fail(
                f"{call}: row {row} reads too few blocks: top_k = {top_k} counts its own block, "
                f"so a query keeps its own block plus its best top_k - 1 = {top_k - 1} earlier "
                f"blocks (with the own block forced in, take the top {top_k} blocks, "
                f"not {top_k - 1})"
            )
        if torch.equal(mask, _choice_with_future_blocks(q, k, block_size, top_k)):
            wanted = expected[row].sum().item()
            _fail(
                f"{call}: row {row} reads {reads} of the {wanted} keys MoBA gives it: a future "
                "block took one of its top_k slots and the causal mask emptied it; a future block "
                "must score -inf before the top-k"
            )
        _fail(
            f"{call}: row {row} picks the wrong earlier block (key {key}); score each earlier "
            "block by q . (mean key of the block)"
        )
    _succeed("own block causally, plus the best earlier blocks by q . mean key")


@_checker
def check_recall(fn: Callable[[Tensor, Tensor, int], Tensor]) -> None:
    """``fn(chosen (T, k), target (T, S), k)`` -> the recall (n,) of the queries with > k keys."""
    generator = _generator(1)
    length, top_k = 9, 3
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    target = torch.rand(length, length, generator=generator, dtype=torch.float64)
    target[-1, -1] = 4.0  # the last query's heaviest key is itself, key S - 1: a -1 read as
    # an index (picks[rows, chosen] = True, or chosen[..., -1]) would wrongly hit it
    target = (target * causal) / (target * causal).sum(-1, keepdim=True)  # (T, S)
    noisy = target + 0.2 * torch.rand(length, length, generator=generator, dtype=torch.float64)
    chosen = topk_tokens(noisy.masked_fill(~causal, float("-inf"))[None], top_k)[0]  # (T, k)
    # the last query: an empty slot (-1: a missed key, so it counts in the denominator), its
    # dense second-best key (a hit) and BOS (a miss, as BOS gets little weight here)
    chosen[-1] = torch.stack([torch.tensor(-1), target[-1].topk(2).indices[1], torch.tensor(0)])
    call = f"recall(chosen ({length}, {top_k}), target ({length}, {length}), {top_k})"
    result = _as_tensor(_call(fn, call, chosen.clone(), target.clone(), top_k), call, "a tensor")
    expected = topk_recall(chosen[None], target[None], top_k)  # (n,)
    if result.dim() != 1 or result.numel() != expected.numel():
        _fail(
            f"{call} should return one recall per query that has more than k = {top_k} keys "
            f"(itself included): "
            f"shape ({expected.numel()},), got {tuple(result.shape)}"
        )
    if _close(result.double(), expected.double(), atol=1e-9):
        _succeed("the share of the dense top k that the indexer also picked")
        return
    if (result > 1).any() or (result < 0).any():
        _fail(f"{call}: a recall is a share, between 0 and 1")
    hits = expected * top_k  # (n,)
    picks = (chosen[top_k:] >= 0).sum(-1).double()  # (n,): picks that are not -1
    if _close(result.double(), hits / picks, atol=1e-9):
        _fail(
            f"{call}: that is precision (hits / picks made); recall divides by k = {top_k}, "
            "so an empty slot (-1) counts as a missed key"
        )
    if result[-1] > expected[-1]:
        _fail(
            f"{call}: the last query scores a hit on key {length - 1} through its empty slot: "
            "a -1 used as an index (picked[rows, chosen] = True) marks the last key; a -1 is "
            "never a hit, so compare ids or drop the -1 slots first"
        )
    _fail(
        f"{call}: recall of query t = |chosen(t) & dense top k(t)| / k; compare the chosen ids "
        "with target[t].topk(k).indices (a -1 is never a hit)"
    )


def _first_above(per_kept: int, per_token: int, top_k: int) -> int:
    """The shortest cache length L with L * per_token > top_k * per_kept, in exact integers."""
    return top_k * per_kept // per_token + 1


def _index_key_bytes(index_dim: int) -> int:
    """An FP8 indexer key: index_dim bytes and one FP32 scale per 128 of them."""
    return index_dim + 4 * (index_dim // 128)


def _crossover_hint(
    call: str, unit: str, got: int, costs: tuple[int, int, int], wrong: dict[int, str]
) -> None:
    """Fail with what ``got`` most likely miscounted; ``costs`` = (per_kept, per_token, top_k)."""
    per_kept, per_token, top_k = costs
    expected = _first_above(per_kept, per_token, top_k)
    if got * per_token == top_k * per_kept:
        _fail(
            f"{call}: {unit}: at L = {got:,} the indexer costs exactly as much as the main "
            f"attention; it costs more only from L = {expected:,} (strictly greater)"
        )
    if got in wrong:
        _fail(f"{call}: {unit}: got {got:,}, expected {expected:,}: {wrong[got]}")
    _fail(
        f"{call}: {unit}: got {got:,}, expected {expected:,}; past top_k tokens the main "
        "attention's cost stops growing, so solve L * (indexer cost per cached token) > "
        "top_k * (attention cost per kept token) for the smallest whole L"
    )


@_checker
def check_indexer_crossover(fn: Callable[[int, int, int], tuple[int, int]]) -> None:
    """``fn(index_heads, index_dim, top_k)`` -> (L in FLOPs, L in bytes): the shortest cache
    lengths at which one decoding step's indexer costs more than DeepSeek-V3.2-Exp's main
    attention over its top_k tokens (MQA mode, BF16 latents; FP8 indexer keys with one FP32
    scale per 128 numbers)."""
    for heads, dim, top_k in [(64, 128, 2048), (32, 256, 1024), (16, 128, 512), (8, 384, 2048)]:
        call = f"indexer_crossover({heads}, {dim}, {top_k})"
        result = _call(fn, call, heads, dim, top_k)
        pair = tuple(result) if isinstance(result, tuple | list) else ()
        if len(pair) != 2 or not all(isinstance(x, int | float) for x in pair):
            _fail(f"{call} should return two numbers (L in FLOPs, L in bytes), got {result!r}")
        if not all(float(x).is_integer() for x in pair):
            _fail(f"{call}: a cache length is a whole number of tokens, got {pair}")
        flops, size = (int(x) for x in pair)
        index_flops, index_bytes = heads * dim * 2, _index_key_bytes(dim)
        flop_costs = (ATTENTION_FLOPS, index_flops, top_k)
        byte_costs = (LATENT_BYTES, index_bytes, top_k)
        expected = (_first_above(*flop_costs), _first_above(*byte_costs))
        if (flops, size) == expected:
            continue
        if (size, flops) == expected:
            _fail(f"{call}: the pair is swapped: FLOPs first, then bytes")
        if flops != expected[0]:
            wrong = {
                _first_above(128 * 576 * 2, index_flops, top_k): "the main attention also "
                "multiplies its weights by the 512-number values, not only q by the keys",
                _first_above((576 + 512) * 2, index_flops, top_k): "every one of the 128 "
                "query heads scores and weighs each kept latent",
                _first_above(128 * (192 + 128) * 2, index_flops, top_k): "the sparse model "
                "runs its main attention in MQA mode (576 + 512 per head), even in prefill",
                _first_above(ATTENTION_FLOPS, dim * 2, top_k): "each of the index_heads "
                "indexer heads has its own query, so the indexer spends index_heads * "
                "index_dim multiply-adds per cached token",
            }
            _crossover_hint(call, "FLOPs", flops, flop_costs, wrong)
        wrong = {
            _first_above(LATENT_BYTES, dim, top_k): "every 128 FP8 numbers carry one "
            "FP32 scale, 4 bytes",
            _first_above(576, index_bytes, top_k): "count bytes on both sides: a latent is "
            f"576 BF16 numbers, {LATENT_BYTES:,} bytes, and an indexer key is cached in FP8 "
            "(1 byte a number)",
            _first_above(576, dim, top_k): "that counts numbers; a latent is 576 BF16 "
            f"numbers, {LATENT_BYTES:,} bytes, and an indexer key index_dim FP8 bytes plus "
            "one 4-byte scale per 128",
            _first_above(LATENT_BYTES, heads * index_bytes, top_k): "the indexer caches "
            "one key per token, shared by its heads (only the queries are per head)",
        }
        _crossover_hint(call, "bytes", size, byte_costs, wrong)
    _succeed(
        "the indexer overtakes from top_k * 278,528 / (2 H^I d^I) tokens in FLOPs and "
        "top_k * 1,152 / (d^I + d^I / 32) in bytes, whatever H^I"
    )
