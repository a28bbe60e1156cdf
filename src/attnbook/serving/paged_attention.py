"""Attention that reads its keys and values through block tables (PagedAttention's idea).

:func:`gather_kv` turns each sequence's block table into its keys and values in position order,
(B, H_kv, S, d_head) with S = n_max * block_size; a row whose table is shorter than the longest
is padded with block 0, whose slots are masked. :func:`paged_attention` then lets the query at
position p see exactly the keys at positions 0..p of its own sequence, which is what the
contiguous :class:`attnbook.KVCache` path computes for one sequence alone. A GPU kernel reads
the blocks in place instead of gathering them; the arithmetic is the same.
"""

from torch import Tensor

from attnbook.core.attention import attend
from attnbook.core.trace import record
from attnbook.serving.paged_cache import PagedKVCache


def gather_kv(cache: PagedKVCache, layer: int, tables: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values (B, H_kv, S, d_head) of the sequences whose block tables are (B, n_max)."""
    batch, n_max = tables.shape
    keys = cache.keys[layer, tables]  # (B, n_max, H_kv, bs, d_head)
    values = cache.values[layer, tables]  # (B, n_max, H_kv, bs, d_head)
    n_kv_heads, head_dim = keys.size(2), keys.size(-1)
    length = n_max * cache.block_size
    # (B, H_kv, n_max, bs, d_head) -> (B, H_kv, S, d_head)
    keys = keys.transpose(1, 2).reshape(batch, n_kv_heads, length, head_dim)
    values = values.transpose(1, 2).reshape(batch, n_kv_heads, length, head_dim)
    return keys, values


def paged_attention(
    q: Tensor, cache: PagedKVCache, layer: int, tables: Tensor, positions: Tensor
) -> Tensor:
    """Causal attention of queries q (B, H, T, d_head) at ``positions`` (B, T) over the cache.

    ``tables`` (B, n_max) are the rows' block tables (:meth:`PagedKVCache.table_tensor`); the
    keys and values of every position up to each query's own must already be written. Query
    head h reads key/value head ``h // (H // H_kv)``. Returns (B, H, T, d_head).
    """
    keys, values = gather_kv(cache, layer, tables)  # (B, H_kv, S, d_head) each
    record("k pages", keys, "B H_kv S d_head", "keys gathered through the block tables")
    record("v pages", values, "B H_kv S d_head", "values gathered through the block tables")
    key_positions = positions.new_tensor(range(keys.size(2)))  # (S,)
    visible = key_positions[None, None, :] <= positions[:, :, None]  # (B, T, S)
    meaning = "slot s holds position s: visible up to the query's position"
    record("visible", visible, "B T S", meaning)
    heads, _ = attend(q, keys, values, visible[:, None])  # (B, H, T, d_head)
    return heads
