"""The tiles a fused kernel computes for MoBA's block choice, queries in order or grouped."""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from attnbook.sparse.tiles import tile_grids

# 0: not causal, 1: causal but skipped, 2: computed
TILE_COLORS = ListedColormap(["white", "#d9d9d9", "#0072B2"])


def plot_tile_grid(chosen: Tensor, tile: int) -> Figure:
    """Two panels of (query tile, key block) tiles for one head's ``chosen`` (T, n_blocks).

    Left, queries in order: tile (i, j) is computed if any query of tile i chose block j.
    Right, queries grouped by block: column j holds the packed tiles of the queries that chose
    block j, drawn from the top of its causal column. Grey tiles are causal but skipped.
    """
    in_order, grouped = tile_grids(chosen, tile)
    n = in_order.size(0)
    causal = np.tril(np.ones((n, n), dtype=int))  # (n, n): 1 on the causal tiles
    left = causal + in_order.numpy().astype(int)
    right = causal.copy()
    for block, count in enumerate(grouped.tolist()):
        right[block : block + count, block] = 2  # block j's causal column starts at row j
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.4), layout="constrained")
    panels = [
        (left, "queries in order", "query tile"),
        (right, "queries grouped by block", "packed query tile"),
    ]
    for ax, (grid, name, ylabel) in zip(axes, panels, strict=True):
        ax.imshow(grid, cmap=TILE_COLORS, vmin=0, vmax=2)
        computed = int((grid == 2).sum())
        ax.set_title(f"{name}: {computed} of {int(causal.sum())} causal tiles")
        ax.set_xlabel(f"key block ({tile} keys)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.tick_params(labelsize=7)
    return fig
