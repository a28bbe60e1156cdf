"""Chapter 5's head split: one D-wide vector cut into H pieces, and where view-transpose puts them.

Three panels, left to right, for one sequence (B = 1) of ``n_tokens`` tokens, labelled with
the 4-D shapes the code uses, so ``.transpose(1, 2)`` swaps the T and H axes as written:

1. ``x`` as (B, T, D): one row per token, its D features coloured by the head that will own them;
2. after ``.view(B, T, H, d_head)``: the same numbers, each row cut into H pieces of d_head;
3. after ``.transpose(1, 2)``: (B, H, T, d_head), one block per head holding its slice of every
   token.

Each cell shows the index of the token it came from, so the third panel makes the point at a
glance: every head holds every token, through its own d_head features.
"""

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import (
    BLUE,
    GREEN,
    ORANGE,
    PINK,
    RED,
    SKY,
    YELLOW,
    arrow,
    box,
    canvas,
    label,
)
from attnbook.core._checks import check_int

HEAD_COLORS = (BLUE, ORANGE, GREEN, PINK, SKY, YELLOW, RED)
CELL = 0.45  # side of one feature's square
GAP = 0.25  # space between the pieces of a row after the view
ARROW = 3.0  # length of the arrows between the panels


def _row(ax: Axes, x: float, y: float, token: int, colors: list[str], gap_every: int) -> None:
    """One token's features as squares from (x, y), a gap after every ``gap_every`` (0: none)."""
    for feature, color in enumerate(colors):
        offset = gap_every and feature // gap_every
        left = x + feature * CELL + offset * GAP
        box(ax, left, y, CELL, CELL, str(token), color=color, text_color="white", fontsize=8)


def head_split(*, n_tokens: int = 3, d_model: int = 12, n_heads: int = 3) -> Figure:
    """Draw (B, T, D) -> view (B, T, H, d_head) -> transpose (B, H, T, d_head) for B = 1."""
    check_int("n_tokens", n_tokens)
    check_int("d_model", d_model)
    check_int("n_heads", n_heads, high=len(HEAD_COLORS))
    if d_model % n_heads:
        raise ValueError(
            f"d_model: {d_model} is not divisible by n_heads = {n_heads}; "
            "each head needs d_head = d_model / n_heads features"
        )
    d_head = d_model // n_heads
    colors = [HEAD_COLORS[feature // d_head] for feature in range(d_model)]
    x_width = d_model * CELL
    view_width = x_width + (n_heads - 1) * GAP
    heads_height = n_heads * n_tokens * CELL + (n_heads - 1) * GAP
    width = 1.2 + x_width + ARROW + view_width + ARROW + d_head * CELL + 2.2
    height = max(heads_height, n_tokens * CELL) + 2.4
    ax = canvas(width, height, inches_per_unit=0.55)
    top = height - 1.4  # the first token row's top edge in panels 1 and 2

    left = 1.2
    for t in range(n_tokens):
        label(ax, (left - 0.5, top - (t + 0.5) * CELL), f"token {t}", fontsize=8, ha="right")
        _row(ax, left, top - (t + 1) * CELL, t, colors, 0)
    for h in range(n_heads):
        middle = left + (h + 0.5) * d_head * CELL
        label(ax, (middle, top + 0.35), f"head {h}", fontsize=8, color=HEAD_COLORS[h])
    label(ax, (left + x_width / 2, height - 0.35), f"x: (B, T, D) = (1, {n_tokens}, {d_model})")

    middle_y = top - n_tokens * CELL / 2
    start = left + x_width + 0.2
    arrow(ax, (start, middle_y), (start + ARROW - 0.4, middle_y))
    label(ax, (start + ARROW / 2 - 0.2, middle_y + 0.35), ".view(B, T, H, d_head)", fontsize=8)

    left = start + ARROW
    for t in range(n_tokens):
        _row(ax, left, top - (t + 1) * CELL, t, colors, d_head)
    label(
        ax,
        (left + view_width / 2, height - 0.35),
        f"(B, T, H, d_head) = (1, {n_tokens}, {n_heads}, {d_head})",
    )
    label(
        ax,
        (left + view_width / 2, top - n_tokens * CELL - 0.45),
        "same memory, each row cut into H pieces",
        fontsize=8,
    )

    start = left + view_width + 0.2
    arrow(ax, (start, middle_y), (start + ARROW - 0.4, middle_y))
    label(ax, (start + ARROW / 2 - 0.2, middle_y + 0.35), ".transpose(1, 2)", fontsize=8)

    left = start + ARROW
    for h in range(n_heads):
        block_top = top - h * (n_tokens * CELL + GAP)
        for t in range(n_tokens):
            _row(ax, left, block_top - (t + 1) * CELL, t, [HEAD_COLORS[h]] * d_head, 0)
        label(
            ax,
            (left + d_head * CELL + 0.15, block_top - n_tokens * CELL / 2),
            f"head {h}: (T, d_head)",
            fontsize=8,
            ha="left",
            color=HEAD_COLORS[h],
        )
    label(
        ax,
        (left + d_head * CELL / 2 + 0.6, height - 0.35),
        f"(B, H, T, d_head) = (1, {n_heads}, {n_tokens}, {d_head})",
    )
    return ax.figure


def multi_head_overview(*, n_heads: int = 3) -> Figure:
    """The whole layer, left to right: x, the three projections, the split into ``n_heads``
    heads (each its own attention over its own d_head slice), the merge, and W_o.

    Each head's box is drawn in its colour from :data:`HEAD_COLORS`, as in :func:`head_split`.
    """
    check_int("n_heads", n_heads, high=len(HEAD_COLORS))
    row = 1.1  # vertical distance between two heads
    height = max(3.6, n_heads * row + 1.6)
    middle = height / 2
    ax = canvas(17.0, height, inches_per_unit=0.6)

    box(ax, 0.2, middle - 0.5, 1.6, 1.0, "x\n(B, T, D)", fontsize=9)
    projections = ["q = x W_q", "k = x W_k", "v = x W_v"]
    for index, text in enumerate(projections):
        y = middle + (1 - index) * 1.0 - 0.4
        box(ax, 2.6, y, 2.2, 0.8, text + "\n(B, T, D)", fontsize=8)
        arrow(ax, (1.8, middle), (2.6, y + 0.4))
        arrow(ax, (4.8, y + 0.4), (6.0, middle))
    box(ax, 6.0, middle - 0.8, 1.8, 1.6, "split\n.view\n.transpose(1, 2)", fontsize=8)
    label(ax, (6.9, middle - 1.15), "(B, H, T, d_head)", fontsize=8)

    top = middle + (n_heads - 1) * row / 2
    for h in range(n_heads):
        y = top - h * row
        arrow(ax, (7.8, middle), (8.8, y), color=HEAD_COLORS[h])
        box(
            ax,
            8.8,
            y - 0.4,
            3.0,
            0.8,
            f"head {h}\nsoftmax(q kᵀ/√d_head) v",
            color=HEAD_COLORS[h],
            text_color="white",
            fontsize=8,
        )
        arrow(ax, (11.8, y), (12.6, middle), color=HEAD_COLORS[h])
    box(ax, 12.6, middle - 0.8, 1.6, 1.6, "merge\n(concat)\n(B, T, D)", fontsize=8)
    arrow(ax, (14.2, middle), (14.7, middle))
    box(ax, 14.7, middle - 0.5, 2.1, 1.0, "merged · W_o\n(B, T, D)", fontsize=9)
    label(ax, (10.3, height - 0.3), f"H = {n_heads} heads, each of width d_head = D / H")
    return ax.figure
