"""attnbook.sparse.tiles: the tiles a kernel computes for a block choice, against loops by hand."""

import math

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from attnbook.book.tile_plot import plot_tile_grid
from attnbook.core.masks import causal_mask
from attnbook.sparse.moba import moba_blocks, moba_mask
from attnbook.sparse.tiles import tile_counts, tile_grids
from attnbook.sparse.topk import selection_mask

matplotlib.use("Agg")


def _by_hand(mask: torch.Tensor, tile: int) -> dict[str, int]:
    """Loops over a (H, T, S) token mask: tiles holding a True, and packed per-block readers."""
    n_heads, query_len, _ = mask.shape
    n = query_len // tile
    in_order = grouped = pairs = 0
    for h in range(n_heads):
        for j in range(n):
            block = mask[h, :, j * tile : (j + 1) * tile]  # (T, tile)
            readers = [t for t in range(query_len) if block[t].any()]
            pairs += len(readers)
            grouped += math.ceil(len(readers) / tile)
            in_order += len({t // tile for t in readers})
    causal = causal_mask(query_len)
    causal_tiles = sum(
        bool(causal[i * tile : (i + 1) * tile, j * tile : (j + 1) * tile].any())
        for i in range(n)
        for j in range(n)
    )
    causal_pairs = sum(t // tile + 1 for t in range(query_len))
    return {
        "causal": n_heads * causal_tiles,
        "queries in order": in_order,
        "queries grouped by block": grouped,
        "pairs": pairs,
        "causal pairs": n_heads * causal_pairs,
    }


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_counts_match_loops_over_moba_token_mask(top_k):
    q, k = torch.randn(2, 1, 3, 24, 4).unbind(0)  # (B, H, T, d) each
    tile = 4
    blocks = moba_blocks(q, k, block_size=tile, top_k=top_k)  # (B, H, T, top_k)
    chosen = selection_mask(blocks, 24 // tile)[0]  # (H, T, n_blocks)
    expected = _by_hand(moba_mask(q, k, block_size=tile, top_k=top_k)[0], tile)
    assert tile_counts(chosen, tile) == expected


def test_a_small_choice_counted_by_hand():
    # T = 4, tiles of 2: query 0 and 1 read block 0; query 2 reads blocks 0 and 1, query 3 block 1
    chosen = torch.tensor([[1, 0], [1, 0], [1, 1], [0, 1]], dtype=torch.bool)
    counts = tile_counts(chosen, 2)
    assert counts == {
        "causal": 3,
        "queries in order": 3,  # tile 0: block 0; tile 1: blocks 0 and 1
        "queries grouped by block": 2 + 1,  # block 0: 3 readers -> 2 tiles; block 1: 2 -> 1
        "pairs": 5,
        "causal pairs": 1 + 1 + 2 + 2,
    }


def test_queries_in_order_cost_at_least_as_many_tiles_and_dense_costs_every_causal_tile():
    dense = torch.arange(4) <= (torch.arange(16) // 4)[:, None]  # (T, n_blocks): causal
    counts = tile_counts(dense, 4)
    assert counts["queries in order"] == counts["causal"] == 10
    assert counts["queries grouped by block"] == 10
    assert counts["pairs"] == counts["causal pairs"]
    scattered = torch.zeros(16, 4, dtype=torch.bool)
    scattered[torch.arange(16), torch.arange(16) // 4] = True  # own block
    scattered[torch.arange(4, 16, 4), 0] = True  # one query per later tile reads block 0
    counts = tile_counts(scattered, 4)
    assert counts["queries in order"] == 4 + 3
    assert counts["queries grouped by block"] == 4 + 1


@pytest.mark.parametrize(
    ("chosen", "tile", "match"),
    [
        ("not a tensor", 2, "chosen: expected a tensor"),
        (torch.ones(4, 2), 2, "chosen: expected a boolean tensor, got dtype torch.float32"),
        (torch.ones(4, dtype=torch.bool), 2, "at least 2 dims"),
        (torch.ones(5, 2, dtype=torch.bool), 2, "T a multiple of tile = 2"),
        (torch.ones(4, 3, dtype=torch.bool), 2, "n_blocks = T / tile, got T = 4, n_blocks = 3"),
        (torch.ones(4, 2, dtype=torch.bool), 0, "tile: expected a positive int, got 0"),
    ],
)
def test_bad_input_is_refused(chosen, tile, match):
    with pytest.raises(ValueError, match=match):
        tile_counts(chosen, tile)


def test_tile_grids_place_the_counted_tiles():
    chosen = torch.tensor([[1, 0], [1, 0], [1, 1], [0, 1]], dtype=torch.bool)  # as above
    in_order, grouped = tile_grids(chosen, 2)
    assert in_order.tolist() == [[True, False], [True, True]]
    assert grouped.tolist() == [2, 1]
    q, k = torch.randn(2, 1, 1, 32, 4).unbind(0)  # (B, H, T, d) each
    chosen = selection_mask(moba_blocks(q, k, block_size=4, top_k=2), 8)[0, 0]  # (T, 8)
    in_order, grouped = tile_grids(chosen, 4)
    counts = tile_counts(chosen, 4)
    assert int(in_order.sum()) == counts["queries in order"]
    assert int(grouped.sum()) == counts["queries grouped by block"]
    assert not in_order.triu(1).any()  # no query tile computes a future block
    assert (grouped <= torch.arange(8, 0, -1)).all()  # block j has 8 - j causal tiles
    with pytest.raises(ValueError, match=r"one head's \(T, n_blocks\), got \(1, 32, 8\)"):
        tile_grids(chosen[None], 4)


def test_the_tile_picture_draws_the_counted_tiles():
    chosen = torch.zeros(16, 4, dtype=torch.bool)
    chosen[torch.arange(16), torch.arange(16) // 4] = True  # own block
    chosen[torch.arange(4, 16, 4), 0] = True  # one query per later tile reads block 0
    figure = plot_tile_grid(chosen, 4)
    left, right = (ax.get_images()[0].get_array() for ax in figure.axes[:2])
    assert (left == 2).sum() == 4 + 3 and (right == 2).sum() == 4 + 1
    assert (left >= 1).sum() == (right >= 1).sum() == 10  # the causal tiles
    assert right[:, 0].tolist() == [2, 2, 1, 1]  # block 0: 7 readers, 2 packed tiles on top
    assert figure.axes[0].get_title() == "queries in order: 7 of 10 causal tiles"
    assert figure.axes[1].get_title() == "queries grouped by block: 5 of 10 causal tiles"
    plt.close(figure)
