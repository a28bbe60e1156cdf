"""Chapter 13's head gates: Michel et al.'s xi_h, one number per head, before W_O.

One multi-head layer, left to right, written as chapter 5's concatenation turned into a sum:
each head's output (B, T, d_head) is multiplied by its gate xi_h, then by W_O^h, the d_head
rows of W_O that it meets, and the H products and the bias b_O are added into the layer's
output (B, T, D).
One head is drawn removed (xi = 0, in grey): its product is zero, whatever the head computed.
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import LIGHT, arrow, box, canvas, label
from attnbook.book.diagrams.heads import HEAD_COLORS
from attnbook.core._checks import check_int

REMOVED = "#9e9e9e"  # grey: a head whose gate is 0


def head_gates(*, n_heads: int = 3, removed: int | None = 1) -> Figure:
    """Draw head_h(x) -> x xi_h -> W_O^h -> sum + b_O for ``n_heads`` heads, ``removed`` at 0.

    ``removed``: the index of the head drawn with xi = 0, or None to draw every gate at 1.
    """
    check_int("n_heads", n_heads, high=len(HEAD_COLORS))
    if removed is not None:
        check_int("removed", removed, low=0, high=n_heads - 1)
    row = 1.1  # vertical distance between two heads
    height = max(3.4, n_heads * row + 1.4)
    middle = height / 2
    ax = canvas(14.0, height, inches_per_unit=0.6)
    top = middle + (n_heads - 1) * row / 2
    for h in range(n_heads):
        y = top - h * row
        off = h == removed
        color = REMOVED if off else HEAD_COLORS[h]
        box(
            ax,
            0.2,
            y - 0.4,
            2.6,
            0.8,
            f"head {h}\n(B, T, d_head)",
            color=color,
            text_color="white",
            fontsize=8,
        )
        arrow(ax, (2.8, y), (3.6, y), color=color)
        gate = f"$\\times\\, \\xi_{h} = 0$\n(removed)" if off else f"$\\times\\, \\xi_{h} = 1$"
        box(ax, 3.6, y - 0.4, 2.0, 0.8, gate, color=LIGHT, fontsize=8)
        arrow(ax, (5.6, y), (6.4, y), color=color)
        box(
            ax, 6.4, y - 0.4, 2.2, 0.8, f"$\\cdot\\, W_O^{h}$\n(d_head, D)", color=LIGHT, fontsize=8
        )
        arrow(ax, (8.6, y), (9.6, middle), color=color)
    box(ax, 9.6, middle - 0.6, 1.2, 1.2, "sum\nover h\n$+\\, b_O$", fontsize=9)
    arrow(ax, (10.8, middle), (11.5, middle))
    box(ax, 11.5, middle - 0.5, 2.3, 1.0, "MHA(x)\n(B, T, D)", fontsize=9)
    label(ax, (7.0, height - 0.3), "model(x, head_mask=gates): gates (L, H), one $\\xi$ per head")
    return ax.figure
