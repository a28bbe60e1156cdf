"""What a decoder keeps between tokens: a growing cache or a fixed state (chapter 18)."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import LIGHT, ORANGE, SKY, arrow, box, canvas, label

__all__ = ["cache_versus_state"]


def cache_versus_state(*, length: int = 6, d_k: int = 4, d_v: int = 4) -> Figure:
    """Left: a KV cache of ``length`` rows that query t reads whole. Right: one d_k x d_v state.

    The state is linear attention's running sum (S and the normaliser z, before the delta rule
    and the gate change how it is written), updated by each token and read by the query with a
    single product, whatever the number of tokens before it.
    """
    ax = canvas(13, 7.2)
    label(ax, (3.0, 6.8), "softmax attention: a cache that grows", fontsize=11)
    for row in range(length):
        y = 5.6 - row * 0.62
        box(ax, 0.5, y, 1.6, 0.5, f"k_{row + 1}", color=SKY, fontsize=9)
        box(ax, 2.3, y, 1.6, 0.5, f"v_{row + 1}", color=SKY, fontsize=9)
    bottom = 5.6 - (length - 1) * 0.62
    box(ax, 4.6, 3.4, 1.2, 0.7, "q_t")
    arrow(ax, (4.6, 3.75), (3.95, 3.75), "")
    label(
        ax,
        (2.2, bottom - 0.55),
        f"t = {length}: {length} keys and {length} values,\n"
        "one more of each per token; query t reads all t",
        fontsize=9,
    )
    label(ax, (9.7, 6.8), "linear attention: a state that does not", fontsize=11)
    box(ax, 8.4, 3.0, 2.6, 2.2, f"S\n({d_k} x {d_v})\n\nz ({d_k})", color=ORANGE)
    box(ax, 7.0, 5.7, 1.3, 0.6, "k_t, v_t", color=LIGHT, fontsize=9)
    box(ax, 11.6, 3.75, 1.2, 0.7, "q_t")
    arrow(ax, (7.7, 5.7), (8.6, 5.2), "write", curve=0.1)
    arrow(ax, (11.6, 4.1), (11.0, 4.1), "")
    label(ax, (10.9, 2.55), "o_t = S^T phi(q_t) / phi(q_t)^T z", fontsize=9)
    label(
        ax,
        (9.7, 1.9),
        "S <- S + phi(k_t) v_t^T,   z <- z + phi(k_t)",
        fontsize=9.5,
        background=True,
    )
    label(
        ax,
        (9.7, 1.1),
        f"after any number of tokens: {d_k} x {d_v} + {d_k} = {d_k * d_v + d_k} numbers per head",
        fontsize=9,
    )
    return ax.figure
