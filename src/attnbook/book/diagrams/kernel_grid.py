"""Chapter 16's picture: which tiles each program of the causal Triton kernels reads."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, ORANGE, box, canvas, label
from attnbook.core._checks import check_int

KERNELS = ("forward", "dkdv")


def _tile_kind(row: int, col: int, ratio: int) -> str:
    """Query block ``row`` against key block ``col``, with ``ratio`` key blocks per query block."""
    if col < ratio * row:
        return "full"
    return "diagonal" if col < ratio * (row + 1) else "skip"


def kernel_programs(*, n_blocks: int = 4, kernel: str = "forward", ratio: int = 1) -> Figure:
    """The causal (T, S) scores cut into tiles, each tile numbered in its program's walk.

    Rows are query blocks, columns key blocks; ``ratio`` key blocks span one query block
    (``BLOCK_M = ratio * BLOCK_N``: 2 for the library's GPU forward, 128 by 64). For
    ``kernel="forward"`` (and the dq kernel, which walks the same way) program i owns query
    block i (a row) and walks left to right: first the tiles left of the diagonal, wholly
    visible (blue, no causal mask), then the ``ratio`` diagonal tiles (orange, causal mask).
    For ``kernel="dkdv"`` (square tiles only) program j owns key block j (a column) and walks
    down: first the diagonal tile, then the ones below it. Tiles right of the diagonal are
    hatched: no program reads them. Both colours still mask keys past S.
    """
    check_int("n_blocks", n_blocks, 2, 6)
    check_int("ratio", ratio, 1, 2)
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    if kernel == "dkdv" and ratio != 1:
        raise ValueError(f"ratio: the dkdv kernel uses square tiles (ratio 1), got {ratio}")
    ax = canvas(n_blocks + 3.6, n_blocks + 2.2, inches_per_unit=0.75)
    top, width = n_blocks + 1.0, 1 / ratio
    for row in range(n_blocks):
        y = top - row - 1
        label(ax, (0.45, y + 0.5), f"Q{row}", fontsize=10)
        for col in range(ratio * n_blocks):
            x, kind = 1 + col * width, _tile_kind(row, col, ratio)
            if kind == "skip":
                patch = box(ax, x + 0.05, y + 0.05, width - 0.1, 0.9, color="white")
                patch.set_hatch("///")
                patch.set_edgecolor("#999999")
                continue
            step = col + 1 if kernel == "forward" else row - col + 1
            color = ORANGE if kind == "diagonal" else BLUE
            box(
                ax, x + 0.05, y + 0.05, width - 0.1, 0.9, str(step), color=color, text_color="white"
            )
        if kernel == "forward":
            label(ax, (n_blocks + 1.2, y + 0.5), f"program {row}", fontsize=9, ha="left")
    for col in range(ratio * n_blocks):
        label(ax, (1 + (col + 0.5) * width, top + 0.3), f"K{col}", fontsize=10 if ratio == 1 else 8)
        if kernel == "dkdv":
            label(ax, (1.5 + col, 0.6), f"prog. {col}", fontsize=8)
    walk = "each row: one program, left to right" if kernel == "forward" else (
        "each column: one program, top to bottom"
    )  # fmt: skip
    label(ax, (1 + n_blocks / 2, top + 0.85), walk, fontsize=9)
    legend = "blue: no causal mask\norange: causal mask\nhatched: never read\nnumber: order"
    label(ax, (n_blocks + 1.2, 0.55), legend, fontsize=8, ha="left")
    return ax.figure
