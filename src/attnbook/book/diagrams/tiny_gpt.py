"""Chapter 12's tiny GPT: the decoder's layers, and where its four attention variants differ.

Left, bottom to top: token and position embeddings, ``n_layers`` pre-norm blocks (attention and
an MLP, each added back to the residual stream), a final norm and the linear head. Right: what
each variant puts in the attention's key/value path and what it caches per token and layer.
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import LIGHT, SKY, YELLOW, arrow, box, canvas, label
from attnbook.core._checks import check_int

__all__ = ["tiny_gpt_variants"]


def _variant_rows(
    n_heads: int, n_kv_heads: int, latent_dim: int, head_dim: int
) -> list[tuple[str, str, str]]:
    """(name, key/value path, cached numbers per token and layer) for the four variants."""
    return [
        ("MHA", f"W_K, W_V: {n_heads} key/value heads", f"2 x {n_heads} x d_head"),
        ("GQA", f"W_K, W_V: {n_kv_heads} heads, shared", f"2 x {n_kv_heads} x d_head"),
        ("MQA", "W_K, W_V: 1 head, shared by all", f"2 x d_head = {2 * head_dim}"),
        ("MLA", "W_DKV -> latent c, then W_UK, W_UV", f"d_c = {latent_dim}"),
    ]


def tiny_gpt_variants(
    *,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    latent_dim: int = 32,
    head_dim: int = 16,
) -> Figure:
    """The tiny GPT's architecture and a table of its four attention variants (sky: cached).

    MQA's cache is written out as ``2 x d_head = 2 * head_dim`` numbers, so that it can be set
    beside MLA's ``d_c = latent_dim``."""
    check_int("n_layers", n_layers)
    check_int("n_heads", n_heads)
    check_int("n_kv_heads", n_kv_heads)
    check_int("latent_dim", latent_dim)
    check_int("head_dim", head_dim)
    ax = canvas(13, 8.2)
    box(ax, 0.3, 0.2, 3.2, 0.7, "token ids (B, T)")
    box(ax, 0.3, 1.3, 3.2, 0.8, "token embedding\n+ position embedding")
    box(ax, 0.0, 2.5, 3.8, 3.65, "", color="white")
    label(ax, (0.45, 5.55), f"block\nx {n_layers}", fontsize=8)
    box(ax, 0.3, 2.7, 3.2, 0.6, "LayerNorm, attention", color=YELLOW)
    box(ax, 0.9, 3.6, 2.0, 0.5, "x + attention", fontsize=8)
    box(ax, 0.3, 4.4, 3.2, 0.6, "LayerNorm, MLP\n(width set per variant)", fontsize=8)
    box(ax, 0.9, 5.15, 2.0, 0.5, "x + MLP", fontsize=8)
    box(ax, 0.3, 6.5, 3.2, 0.6, "LayerNorm, linear head")
    box(ax, 0.3, 7.4, 3.2, 0.6, "logits (B, T, V)")
    for bottom, top in [(0.9, 1.3), (2.1, 2.7), (3.3, 3.6), (4.1, 4.4), (5.0, 5.15), (5.65, 6.5)]:
        arrow(ax, (1.9, bottom), (1.9, top))
    arrow(ax, (1.9, 7.1), (1.9, 7.4))
    arrow(ax, (3.5, 3.0), (4.6, 4.6), "differs by\nvariant", curve=-0.2, fontsize=8)
    label(ax, (5.1, 7.6), "variant", fontsize=10, ha="left")
    label(ax, (6.4, 7.6), "keys and values come from", fontsize=10, ha="left")
    label(ax, (10.3, 7.6), "cached per token, layer", fontsize=10, ha="left")
    rows = _variant_rows(n_heads, n_kv_heads, latent_dim, head_dim)
    for row, (name, path, cached) in enumerate(rows):
        y = 6.6 - 1.2 * row
        box(ax, 4.7, y, 1.3, 0.8, name, color=LIGHT)
        box(ax, 6.2, y, 3.9, 0.8, path, color=LIGHT, fontsize=9)
        box(ax, 10.3, y, 2.5, 0.8, cached, color=SKY, fontsize=9)
    label(
        ax,
        (8.7, 1.4),
        f"every variant has {n_heads} query heads; the key/value path, the cache\n"
        "and the MLP width differ (the width matches the parameters)",
        fontsize=8.5,
    )
    return ax.figure
