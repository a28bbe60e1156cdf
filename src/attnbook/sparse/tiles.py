"""What a block choice saves a tiled kernel: the (query tile, key block) tiles it must compute.

A fused kernel computes attention tile by tile, a tile being ``tile`` queries against one block
of ``tile`` keys, and skips a tile only when none of its queries reads any of its keys. Causal
attention over T = n * tile tokens computes n (n + 1) / 2 tiles. With a per-query block choice
(MoBA's, at block size = tile), two layouts count differently:

- **queries in order**: tile i holds queries i * tile to (i + 1) * tile - 1, and it must compute
  block j if *any* of them chose j; this is what FlexAttention's ``create_block_mask`` records
  for a mask (per query tile, the key tiles holding any True);
- **queries grouped by block**: for each block, the queries that chose it are gathered and
  packed into ceil(count / tile) tiles, as MoBA's kernel does before calling a variable-length
  FlashAttention. No tile is then computed for a query that did not choose its block.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_int, check_tensor


def _check_chosen(chosen: Tensor, tile: int) -> None:
    check_tensor("chosen", chosen, "(..., T, n_blocks)")
    if chosen.dtype != torch.bool:
        raise ValueError(f"chosen: expected a boolean tensor, got dtype {chosen.dtype}")
    check_int("tile", tile)
    query_len, n_blocks = chosen.shape[-2:]
    if query_len % tile or n_blocks != query_len // tile:
        raise ValueError(
            f"chosen: expected T a multiple of tile = {tile} and n_blocks = T / tile, "
            f"got T = {query_len}, n_blocks = {n_blocks}"
        )


def tile_counts(chosen: Tensor, tile: int) -> dict[str, int]:
    """Tiles of ``tile`` queries by ``tile`` keys a kernel computes for a per-query block choice.

    ``chosen`` (..., T, n_blocks) bool, True where query t reads (some keys of) block j, with
    n_blocks = T / tile; leading dims (batch, heads) are counted separately and summed. Returns
    ``{"causal": ..., "queries in order": ..., "queries grouped by block": ...,
    "pairs": ..., "causal pairs": ...}``: the tile counts of dense causal attention and of the
    two layouts (see the module docstring), and the (query, block) pairs read against the causal
    ones, the block-level share of the keys each query reads.
    """
    _check_chosen(chosen, tile)
    query_len, n_blocks = chosen.shape[-2:]
    n_groups = chosen[..., 0, 0].numel()  # batch items times heads
    # (..., n_blocks, tile, n_blocks): query tile i, its tile queries, every block
    by_tile = chosen.reshape(*chosen.shape[:-2], n_blocks, tile, n_blocks)
    in_order = by_tile.any(-2).sum()  # key blocks any query of the tile reads
    readers = chosen.sum(-2)  # (..., n_blocks): queries that chose each block
    grouped = torch.div(readers + tile - 1, tile, rounding_mode="floor").sum()
    own_block = torch.arange(query_len, device=chosen.device) // tile  # (T,)
    return {
        "causal": n_groups * n_blocks * (n_blocks + 1) // 2,
        "queries in order": int(in_order),
        "queries grouped by block": int(grouped),
        "pairs": int(chosen.sum()),
        "causal pairs": n_groups * int((own_block + 1).sum()),
    }


def tile_grids(chosen: Tensor, tile: int) -> tuple[Tensor, Tensor]:
    """Where the tiles of :func:`tile_counts` fall, for one head's choice ``chosen`` (T, n_blocks).

    Returns ``(in_order, grouped)``: ``in_order`` (n_blocks, n_blocks) bool, True where query
    tile i must compute key block j (any of its queries chose j); ``grouped`` (n_blocks,) int,
    the tiles block j needs once the queries that chose it are packed together. Their sums are
    ``tile_counts``' "queries in order" and "queries grouped by block".
    """
    _check_chosen(chosen, tile)
    if chosen.dim() != 2:
        raise ValueError(f"chosen: expected one head's (T, n_blocks), got {tuple(chosen.shape)}")
    n_blocks = chosen.size(-1)
    # (n_blocks, n_blocks): query tile i against key block j
    in_order = chosen.reshape(n_blocks, tile, n_blocks).any(1)
    readers = chosen.sum(0)  # (n_blocks,): queries that chose each block
    return in_order, torch.div(readers + tile - 1, tile, rounding_mode="floor")
