"""Multi-head latent attention's data flow: what is projected, cached and rebuilt (chapter 11)."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import LIGHT, SKY, arrow, box, canvas, label
from attnbook.core._checks import check_int

__all__ = ["mla_absorbed_flow", "mla_data_flow"]


def mla_data_flow(*, latent_dim: int = 512, rope_dim: int = 64, head_dim: int = 128) -> Figure:
    """MLA with the decoupled rotary key, for one token x_t (DeepSeek-V2's widths by default).

    Sky blue: what the cache keeps per token, the latent c_KV (``latent_dim``) and the shared
    rotary key k_R (``rope_dim``). The up-projections W_UK and W_UV rebuild each head's content
    key and value from c_KV; the absorbed form folds them into the query and output instead.
    """
    check_int("latent_dim", latent_dim)
    check_int("rope_dim", rope_dim)
    check_int("head_dim", head_dim)
    ax = canvas(12, 7.6)
    box(ax, 0.2, 3.4, 1.1, 0.9, "x_t\n(D)")
    box(ax, 4.0, 6.2, 2.4, 0.9, f"q_C per head\n(H, {head_dim})")
    box(ax, 4.0, 5.0, 2.4, 0.9, f"q_R per head\n(H, {rope_dim}), rotated")
    box(ax, 2.4, 3.4, 1.7, 0.9, f"c_KV\n({latent_dim})", color=SKY)
    box(ax, 5.6, 3.9, 1.9, 0.8, f"k_C per head\n(H, {head_dim})")
    box(ax, 5.6, 2.6, 1.9, 0.8, f"v per head\n(H, {head_dim})")
    box(ax, 4.0, 1.0, 2.4, 0.9, f"k_R ({rope_dim}), rotated,\nshared by all heads", color=SKY)
    box(
        ax,
        8.2,
        2.6,
        2.3,
        2.8,
        "attention\nper head:\n[q_C; q_R] · [k_C; k_R]\nsoftmax,\nmix v",
        color=LIGHT,
    )
    box(ax, 10.9, 3.5, 0.9, 0.8, "W_O\nout")
    arrow(ax, (1.3, 4.1), (4.0, 6.6), "W_Q", curve=-0.15)
    arrow(ax, (1.3, 4.0), (4.0, 5.4), "W_QR, R_t", curve=-0.1)
    arrow(ax, (1.3, 3.85), (2.4, 3.85), "W_DKV")
    arrow(ax, (1.3, 3.6), (4.0, 1.45), "W_KR, R_t", curve=0.15)
    arrow(ax, (4.1, 4.0), (5.6, 4.3), "W_UK")
    arrow(ax, (4.1, 3.7), (5.6, 3.0), "W_UV")
    arrow(ax, (6.4, 6.6), (8.2, 5.2), curve=-0.1)
    arrow(ax, (6.4, 5.4), (8.2, 4.9))
    arrow(ax, (7.5, 4.3), (8.2, 4.3))
    arrow(ax, (7.5, 3.0), (8.2, 3.0))
    arrow(ax, (6.4, 1.45), (8.2, 2.8), curve=0.1)
    arrow(ax, (10.5, 3.9), (10.9, 3.9))
    label(ax, (3.25, 2.95), "cached", fontsize=9)
    label(ax, (5.2, 0.6), "cached", fontsize=9)
    label(
        ax,
        (6.0, 0.15),
        f"cache per token and layer: {latent_dim} + {rope_dim} = {latent_dim + rope_dim} "
        "numbers. Absorbed decoding never builds k_C or v: W_UK folds into the query, "
        "W_UV into W_O.",
        fontsize=8.5,
    )
    return ax.figure


def mla_absorbed_flow(
    *, latent_dim: int = 512, rope_dim: int = 64, head_dim: int = 128, n_heads: int = 128
) -> Figure:
    """Absorbed MLA decoding as multi-query attention over the cached latents.

    Each head's content query is folded into the latent space by W_UK^T; all ``n_heads`` heads
    then score against one shared cached "key" [c_KV; k_R] (``latent_dim + rope_dim`` wide) and
    mix one shared "value" c_KV; W_UV, folded into W_O, maps the mixed latents to the output.
    No per-head key or value is ever built.
    """
    check_int("latent_dim", latent_dim)
    check_int("rope_dim", rope_dim)
    check_int("head_dim", head_dim)
    check_int("n_heads", n_heads)
    shared = latent_dim + rope_dim
    ax = canvas(13, 6.4)
    box(ax, 0.2, 3.2, 1.1, 0.9, "x_t\n(D)")
    box(ax, 2.1, 4.6, 2.0, 0.9, f"q_C per head\n(H, {head_dim})")
    box(ax, 5.3, 4.6, 2.3, 0.9, f"q in latent space\n(H, {latent_dim})")
    box(ax, 5.3, 3.2, 2.3, 0.9, f"q_R per head\n(H, {rope_dim}), rotated")
    box(
        ax,
        2.3,
        0.7,
        5.3,
        1.1,
        f"cache: [c_KV; rotated k_R] per token, {shared} numbers,\n"
        "one key/value head shared by all heads",
        color=SKY,
    )
    box(
        ax,
        8.3,
        2.3,
        1.9,
        3.2,
        f"multi-query\nattention:\n{n_heads} query heads,\n1 key head\nof width {shared}\n"
        f"values: c_KV\n({latent_dim})",
        color=LIGHT,
        fontsize=9,
    )
    box(ax, 11.7, 3.2, 1.1, 0.9, "out\n(D)")
    arrow(ax, (1.3, 3.9), (2.1, 5.0), "W_Q", curve=-0.15)
    arrow(ax, (4.1, 5.05), (5.3, 5.05))
    label(ax, (4.7, 5.45), "W_UK^T", fontsize=9)
    arrow(ax, (1.3, 3.65), (5.3, 3.65), "W_QR, R_t")
    arrow(ax, (1.3, 3.4), (2.3, 1.3), "W_DKV; W_KR, R_t", curve=0.15)
    arrow(ax, (7.6, 5.05), (8.3, 4.6))
    arrow(ax, (7.6, 3.65), (8.3, 3.65))
    arrow(ax, (7.6, 1.25), (8.3, 2.8), curve=0.1)
    arrow(ax, (10.2, 3.65), (11.7, 3.65))
    label(ax, (10.95, 4.05), "W_UV, W_O", fontsize=9)
    label(
        ax,
        (6.5, 0.2),
        f"per decoding step each cached token is read once for all {n_heads} heads; no "
        "per-head key or value is built.",
        fontsize=8.5,
    )
    return ax.figure
