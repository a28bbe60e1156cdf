"""Chapter 16's second picture: where the forward kernel's tensors live on a GPU."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, LIGHT, ORANGE, SKY, arrow, box, canvas, label
from attnbook.core._checks import check_int

__all__ = ["kernel_memory"]

COLUMNS = (0.7, 3.7, 6.7, 9.7)  # left edges of the four columns of boxes


def kernel_memory(*, block_m: int = 128, block_n: int = 64) -> Figure:
    """The forward kernel's data in three levels of GPU memory, with one program's traffic.

    Top, in HBM (off chip): the whole Q, K, V, O and lse. Middle, the L2 cache that every
    multiprocessor shares and that every read and write passes through. Bottom, the on-chip
    memory (shared memory and registers) of the multiprocessor running program i: its query
    block, the current key and value blocks, the tile of scores and weights, and the running
    statistics and output. Arrows: Q_i read once, K_j and V_j at every step j, O_i and lse_i
    written once at the end; the scores have no arrow, since they never leave the chip.
    ``block_m`` and ``block_n`` label the tiles (the library's GPU forward: 128 by 64).
    """
    check_int("block_m", block_m, 16, 256)
    check_int("block_n", block_n, 16, 256)
    ax = canvas(13.0, 9.3, inches_per_unit=0.72)
    # HBM: the whole tensors
    box(ax, 0.2, 7.0, 12.6, 2.1, color=LIGHT)
    label(ax, (0.45, 8.75), "HBM: GPU main memory, off chip", fontsize=10, ha="left")
    hbm = ("Q (B, H, T, d)", "K, V (B, H, S, d)", "O (B, H, T, d)", "lse (B, H, T)")
    for x, text in zip(COLUMNS, hbm, strict=True):
        box(ax, x, 7.25, 2.6, 1.0, text, color=SKY, fontsize=9.5)
    # L2: shared by all multiprocessors, on the way of every access
    box(ax, 0.2, 5.0, 12.6, 1.3, color=LIGHT)
    label(
        ax,
        (6.5, 5.65),
        "L2 cache, on chip, shared by every multiprocessor: every read and write passes\n"
        "through it; a block of K, V that one program read may still be here for the next",
        fontsize=9,
        background=True,
    )
    # one multiprocessor's on-chip memory: one program's working set
    box(ax, 0.2, 0.2, 12.6, 4.0, color=LIGHT)
    label(
        ax,
        (0.45, 1.05),
        "on chip: the multi-\nprocessor running\nprogram i (shared\nmemory, registers)",
        fontsize=10,
        ha="left",
    )
    tiles = (
        (f"$Q_i$\n({block_m} x d)", BLUE, "white"),
        (f"$K_j$, $V_j$\n({block_n} x d each)", ORANGE, "white"),
        (f"$\\tilde O$\n({block_m} x d)", SKY, "black"),
        (f"m, $\\ell$\n({block_m} each)", SKY, "black"),
    )
    for x, (text, color, text_color) in zip(COLUMNS, tiles, strict=True):
        box(ax, x, 2.1, 2.6, 1.2, text, color=color, text_color=text_color, fontsize=9.5)
    box(
        ax,
        3.7,
        0.45,
        5.6,
        1.2,
        f"scores Z, weights $\\tilde A$ ({block_m} x {block_n}):\nmade, used and dropped here",
        color="white",
        fontsize=9.5,
    )
    traffic = ("read once", "read at every step j", "$O_i$ written once", "lse$_i$ written once")
    for x, text in zip(COLUMNS, traffic, strict=True):
        middle = x + 1.3
        start, end = (middle, 7.25), (middle, 3.3)
        arrow(ax, *((start, end) if "read" in text else (end, start)))
        label(ax, (middle, 4.6), text, fontsize=9, background=True)
    return ax.figure
