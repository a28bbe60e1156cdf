"""Chapter 19's exercise checkers: MoBA's choice of blocks, an indexer's recall and NSA's
summary mask."""

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
from attnbook.sparse.indexer import topk_recall, topk_tokens
from attnbook.sparse.moba import moba_mask
from attnbook.sparse.nsa import compressed_mask

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


@_checker
def check_summary_mask(fn: Callable[[int, int], Tensor]) -> None:
    """``fn(T, block_size)`` -> NSA's (T, T // block_size) mask: the summaries query t reads."""
    for length, block_size in [(16, 4), (10, 3), (9, 2), (5, 8)]:
        call = f"summary_mask({length}, {block_size})"
        n_blocks = length // block_size
        result = _as_tensor(_call(fn, call, length, block_size), call, "a boolean tensor")
        shape = tuple(result.shape)
        if shape == (length, -(-length // block_size)) != (length, n_blocks):
            _fail(
                f"{call}: expected shape ({length}, {n_blocks}), got {shape}: only "
                "complete blocks have a summary, so n_blocks = T // block_size (a partial last "
                "block has none yet)"
            )
        if shape == (length, length) != (length, n_blocks):
            _fail(
                f"{call}: expected shape ({length}, {n_blocks}), got {shape}: one "
                "column per block summary, not one per key"
            )
        mask = _check_bool_mask(result, call, (length, n_blocks))
        expected = compressed_mask(length, block_size)
        if torch.equal(mask, expected):
            continue
        row, block = _first_difference(mask, expected)
        last = (block + 1) * block_size - 1  # the block's last key
        if mask[row, block] and last > row:
            _fail(
                f"{call}: row {row} reads the summary of block {block}, whose last key {last} is "
                "in its future; a summary mixes every key of its block, so a query may read it "
                "only once the block is complete"
            )
        if last == row:
            _fail(
                f"{call}: row {row} misses block {block}, which ends at key {row}, the query "
                "itself; a block is complete once its last key is at or before t"
            )
        _fail(
            f"{call}: row {row}, block {block} should be {bool(expected[row, block])}: query t "
            "reads block j's summary when (j + 1) * block_size - 1 <= t"
        )
    _succeed("each query reads the summaries of the blocks complete at its position")
