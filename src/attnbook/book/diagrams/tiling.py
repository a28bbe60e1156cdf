"""Chapter 9's picture: tiled attention as a grid of (query block, key block) tiles."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, LIGHT, ORANGE, SKY, box, canvas, label
from attnbook.core._checks import check_int


def _check_current(current: object, n_query_blocks: int, n_key_blocks: int) -> None:
    """``current`` is a (row, column) tile of the grid that the causal mask does not skip."""
    is_pair = isinstance(current, tuple) and len(current) == 2
    ints = is_pair and all(isinstance(i, int) and not isinstance(i, bool) for i in current)
    if (
        not ints
        or not (0 <= current[1] <= current[0] < n_query_blocks)
        or (current[1] >= n_key_blocks)
    ):
        raise ValueError(
            f"current: expected a (row, column) pair of ints with 0 <= column <= row, row < "
            f"n_query_blocks = {n_query_blocks} and column < n_key_blocks = {n_key_blocks} "
            f"(a tile the causal mask keeps), got {current!r}"
        )


def tiling_grid(
    *, n_query_blocks: int = 4, n_key_blocks: int = 4, current: tuple[int, int] = (2, 1)
) -> Figure:
    """The (T, S) scores cut into tiles, under a causal mask, while one tile is computed.

    Rows are query blocks, columns key/value blocks. Tiles already folded into the running
    statistics of their row are blue, the ``current`` (row, column) tile orange, tiles still to
    come light, and tiles above the diagonal, which no query of their block may see, are
    hatched: skipped. Beside each row sit its running max m, sum l and output o; below, the
    key/value blocks, the one being read light blue (the legend says so). The rows of queries
    are independent (FlashAttention-2's outer loop); each walks along its key blocks.
    """
    check_int("n_query_blocks", n_query_blocks)
    check_int("n_key_blocks", n_key_blocks)
    _check_current(current, n_query_blocks, n_key_blocks)
    ax = canvas(n_key_blocks + 4.6, n_query_blocks + 2.4, inches_per_unit=0.75)
    top = n_query_blocks + 1.0
    row_now, col_now = current
    for row in range(n_query_blocks):
        y = top - row - 1
        label(ax, (0.45, y + 0.5), f"Q{row}", fontsize=10)
        for col in range(n_key_blocks):
            x = 1 + col
            if col > row:
                patch = box(ax, x + 0.05, y + 0.05, 0.9, 0.9, color="white")
                patch.set_hatch("///")
                patch.set_edgecolor("#999999")
                continue
            done = row < row_now or (row == row_now and col < col_now)
            color = ORANGE if (row, col) == current else (BLUE if done else LIGHT)
            text = "now" if (row, col) == current else ""
            box(ax, x + 0.05, y + 0.05, 0.9, 0.9, text, color=color)
        state = {True: "m, l, o: final", False: "m, l, o"}[row < row_now]
        if row == row_now:
            state = "m, l, o <- updating"
        color = ORANGE if row == row_now else "black"
        label(ax, (n_key_blocks + 1.2, y + 0.5), state, fontsize=9, ha="left", color=color)
    for col in range(n_key_blocks):
        color = SKY if col == col_now else LIGHT
        box(ax, 1 + col + 0.05, 0.1, 0.9, 0.7, f"K{col},V{col}", color=color, fontsize=8)
    label(ax, (1 + n_key_blocks / 2, top + 0.6), "key/value blocks (columns) ->", fontsize=9)
    label(ax, (n_key_blocks + 2.6, top + 0.6), "running per row", fontsize=9)
    label(ax, (0.45, top + 0.6), "queries", fontsize=9)
    legend = (
        "blue: done\norange: now\nlight: to come\nhatched: skipped\n"
        "light blue (below): K,V block read now"
    )
    label(ax, (n_key_blocks + 1.2, 0.45), legend, fontsize=8, ha="left")
    return ax.figure
