"""Chapter 5's head split: one D-wide vector cut into H pieces, and where view-transpose puts them.

Three panels, left to right, for one sequence of ``n_tokens`` tokens:

1. ``x`` as (T, D): one row per token, its D features coloured by the head that will own them;
2. after ``.view(B, T, H, d_head)``: the same numbers, each row cut into H pieces of d_head;
3. after ``.transpose(1, 2)``: (H, T, d_head), one block per head holding its slice of every
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
    """Draw (T, D) -> view (T, H, d_head) -> transpose (H, T, d_head), coloured by head."""
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
    label(ax, (left + x_width / 2, height - 0.35), f"x: (T, D) = ({n_tokens}, {d_model})")

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
        f"(T, H, d_head) = ({n_tokens}, {n_heads}, {d_head})",
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
        f"(H, T, d_head) = ({n_heads}, {n_tokens}, {d_head})",
    )
    return ax.figure
