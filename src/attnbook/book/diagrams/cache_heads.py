"""Chapter 6's cache per token: what multi-head, grouped-query and multi-query attention keep.

One panel per number of key/value heads, side by side and aligned at the top, so the columns
shrink with H_kv. In a panel every cached token is a column of H_kv key vectors (blue) above
H_kv value vectors (orange), each row marked with the query heads that read it; a footer gives
the vectors and bytes per token and layer. The queries appear only in the titles: they are used
once, for the token being generated, and never cached.
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, ORANGE, box, canvas, label
from attnbook.core._checks import check_int

CELL = 0.42  # side of one cached vector's square
ROW_LABEL = 1.9  # room left of a panel's columns for the row labels
PANEL_GAP = 0.9  # space between two panels
MAX_HEADS = 16
MAX_TOKENS = 8


def _kind(n_heads: int, n_kv_heads: int) -> str:
    if n_kv_heads == n_heads:
        return "multi-head"
    return "multi-query" if n_kv_heads == 1 else "grouped-query"


def _readers(n_heads: int, n_kv_heads: int, g: int) -> str:
    """The query heads that read key/value head g, as "q 4-7" (or "q 4" for one)."""
    group = n_heads // n_kv_heads
    first, last = g * group, (g + 1) * group - 1
    return f"q {first}" if first == last else f"q {first}-{last}"


def cache_per_token(
    *,
    n_heads: int = 8,
    kv_choices: tuple[int, ...] = (8, 2, 1),
    n_tokens: int = 4,
    head_dim: int = 8,
    element_bytes: int = 4,
) -> Figure:
    """Draw the cached keys and values of ``n_tokens`` tokens for each H_kv in ``kv_choices``."""
    check_int("n_heads", n_heads, high=MAX_HEADS)
    check_int("n_tokens", n_tokens, high=MAX_TOKENS)
    check_int("head_dim", head_dim)
    check_int("element_bytes", element_bytes)
    if not isinstance(kv_choices, tuple) or not kv_choices:
        raise ValueError(f"kv_choices: expected a non-empty tuple of ints, got {kv_choices!r}")
    for n_kv in kv_choices:
        check_int("kv_choices", n_kv, high=n_heads)
        if n_heads % n_kv:
            raise ValueError(
                f"kv_choices: {n_kv} does not divide n_heads = {n_heads}; "
                "every key/value head needs a whole group of G = H / H_kv query heads"
            )
    panel_width = ROW_LABEL + n_tokens * CELL
    width = len(kv_choices) * panel_width + (len(kv_choices) - 1) * PANEL_GAP + 0.2
    tallest = 2 * max(kv_choices) * CELL + 0.2  # keys, a gap, values
    height = tallest + 2.9  # two title lines, the token row, two footer lines
    ax = canvas(width, height, inches_per_unit=0.55)
    top = height - 1.55  # the top edge of the first key row
    for panel, n_kv in enumerate(kv_choices):
        left = 0.1 + panel * (panel_width + PANEL_GAP)
        columns = left + ROW_LABEL
        title = f"{_kind(n_heads, n_kv)}\nH = {n_heads} query heads, H_kv = {n_kv}"
        label(ax, (left + panel_width / 2, height - 0.45), title, fontsize=9)
        for t in range(n_tokens):
            label(ax, (columns + (t + 0.5) * CELL, top + 0.3), f"t{t + 1}", fontsize=7)
        for row in range(2 * n_kv):
            g, is_value = row % n_kv, row >= n_kv
            y = top - (row + 1) * CELL - (0.2 if is_value else 0.0)
            name = f"v{g}" if is_value else f"k{g}"
            text = f"{name} \u2190 {_readers(n_heads, n_kv, g)}"
            label(ax, (columns - 0.1, y + CELL / 2), text, fontsize=7, ha="right")
            for t in range(n_tokens):
                x = columns + t * CELL
                color = ORANGE if is_value else BLUE
                box(ax, x + 0.03, y + 0.03, CELL - 0.06, CELL - 0.06, color=color)
        vectors = 2 * n_kv
        footer = (
            f"{vectors} vectors of {head_dim} numbers per token\n"
            f"= {vectors * head_dim * element_bytes} bytes per token and layer"
        )
        label(ax, (left + panel_width / 2, 0.55), footer, fontsize=8)
    return ax.figure
