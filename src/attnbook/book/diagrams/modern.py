"""Where chapter 15's options plug into one attention layer (chapter 15).

The layer of :class:`attnbook.GroupedQueryAttention`, from the input x to the output, with each
option of today's models drawn where it acts: QK-norm and the rotary embedding on the queries
and keys, the soft-cap and the mask on the scores (the layer's ``window`` builds a boolean tensor
mask, not a FlexAttention ``mask_mod``), the sink column in the softmax (never with the soft-cap:
the layer refuses the two together), and the output gate before W_O.
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import LIGHT, ORANGE, arrow, box, canvas, label

__all__ = ["attention_options"]

OPTION = ORANGE  # the boxes that are options, switched on by an argument


def attention_options(*, window: int = 4096, cap: float = 50.0) -> Figure:
    """One attention layer, left to right, with every option of chapter 15 in orange.

    ``window`` and ``cap`` only label the window and soft-cap boxes (Mistral's and Gemma 2's
    values by default); each orange box names the argument of ``GroupedQueryAttention`` that
    switches it on.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window: expected a positive int, got {window!r}")
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not cap > 0:
        raise ValueError(f"cap: expected a number > 0, got {cap!r}")
    ax = canvas(15, 6.0, inches_per_unit=0.7)
    box(ax, 0.1, 2.6, 1.0, 0.9, "x\n(B, T, D)")
    box(ax, 1.6, 4.3, 1.0, 0.8, "W_Q")
    box(ax, 1.6, 2.65, 1.0, 0.8, "W_K")
    box(ax, 1.6, 1.0, 1.0, 0.8, "W_V")
    top = {"y": 3.6, "height": 1.4, "fontsize": 8}
    box(ax, 3.1, **top, width=1.5, text="QK-norm\nqk_norm=True", color=OPTION)
    box(ax, 4.9, **top, width=1.4, text="RoPE\nrope=True", color=OPTION)
    box(ax, 6.6, **top, width=1.3, text="q · k / √d\nscores", color=LIGHT)
    box(ax, 8.2, **top, width=1.5, text=f"soft-cap\nc = {cap:g}\nlogit_softcap", color=OPTION)
    box(ax, 10.0, **top, width=1.5, text=f"mask\nwindow={window}\n(bool tensor)", color=OPTION)
    box(ax, 11.8, **top, width=1.5, text="softmax with\na sink column\nsinks=True", color=OPTION)
    box(ax, 11.9, 1.0, 1.3, 0.8, "mix V", color=LIGHT, fontsize=9)
    box(ax, 13.5, 1.0, 1.3, 0.8, "⊙ σ(x W_g)\noutput_gate", color=OPTION, fontsize=8)
    box(ax, 13.5, 2.4, 1.3, 0.8, "W_O → out", color=LIGHT, fontsize=9)
    arrow(ax, (1.1, 3.2), (1.6, 4.6), curve=-0.2)
    arrow(ax, (1.1, 3.05), (1.6, 3.05))
    arrow(ax, (1.1, 2.9), (1.6, 1.4), curve=0.2)
    arrow(ax, (2.6, 4.7), (3.1, 4.5))
    arrow(ax, (2.6, 3.05), (3.1, 3.9))
    for start, end in ((4.6, 4.9), (6.3, 6.6), (7.9, 8.2), (9.7, 10.0), (11.5, 11.8)):
        arrow(ax, (start, 4.3), (end, 4.3))
    arrow(ax, (12.55, 3.6), (12.55, 1.8), "weights")
    arrow(ax, (2.6, 1.4), (11.9, 1.4), "v (QK-norm and RoPE act on q and k only)")
    arrow(ax, (13.2, 1.4), (13.5, 1.4))
    arrow(ax, (14.15, 1.8), (14.15, 2.4))
    arrow(ax, (0.6, 2.6), (0.6, 0.4), style="-")
    arrow(ax, (0.6, 0.4), (14.15, 0.4), "x also feeds the gate", style="-")
    arrow(ax, (14.15, 0.4), (14.15, 1.0))
    label(
        ax,
        (3.1, 5.6),
        "orange: an option of GroupedQueryAttention (the argument that switches it on)",
        fontsize=9,
        ha="left",
    )
    label(
        ax,
        (8.2, 5.25),
        "soft-cap and sinks=True exclude each other: the layer refuses the two together",
        fontsize=8,
        ha="left",
    )
    return ax.figure
