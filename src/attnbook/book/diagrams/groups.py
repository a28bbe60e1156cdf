"""Chapter 6's query groups: H query heads, H_kv key/value heads, and the copy-free reshape.

Three columns, left to right, labelled with the shapes the chapter's code uses:

1. the queries as (B, H, T, d_head): one box per query head, in the colour of the key/value head
   it reads (query head h reads key/value head h // G, G = H / H_kv);
2. after ``.reshape(B, H_kv, G * T, d_head)``: the same boxes, the G query heads of a group
   stacked as the rows of one block per key/value head, each box marked with its [group,
   index] and the head it was (a footer says so, and that each box stands for T rows);
3. the keys and values, (B, H_kv, S, d_head) as the cache stores them: one box per key/value
   head, with an arrow from every query head of its group (read by G query heads, stored once).
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import arrow, box, canvas, label
from attnbook.book.diagrams.heads import HEAD_COLORS
from attnbook.core._checks import check_int

ROW = 0.6  # vertical distance between two query heads
HEIGHT = 0.48  # height of one query head's box
GAP = 0.45  # extra space between two groups after the reshape
WIDTH = 2.6  # width of a query head's box
KV_WIDTH = 3.2  # width of a key/value head's box
MAX_HEADS = 16


def query_groups(*, n_heads: int = 8, n_kv_heads: int = 2) -> Figure:
    """Draw which key/value head each query head reads, and the (B, H_kv, G * T, d_head) reshape."""
    check_int("n_heads", n_heads, high=MAX_HEADS)
    check_int("n_kv_heads", n_kv_heads, high=len(HEAD_COLORS))
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads: {n_heads} is not divisible by n_kv_heads = {n_kv_heads}; "
            "every key/value head needs a whole group of G = H / H_kv query heads"
        )
    group = n_heads // n_kv_heads
    body = n_heads * ROW + (n_kv_heads - 1) * GAP  # height of the grouped column
    width, height = 17.0, body + 3.1  # room for two lines of footer
    ax = canvas(width, height, inches_per_unit=0.5)
    top = height - 1.3  # the top edge of the first query head's box

    def grouped_y(h: int) -> float:
        """Bottom edge of query head h's box after the reshape: a gap after every group."""
        return top - (h + 1) * ROW - (h // group) * GAP

    # column 1: q as (B, H, T, d_head), evenly spaced, centred on the grouped column
    left = 0.3
    shift = (n_kv_heads - 1) * GAP / 2
    for h in range(n_heads):
        y = top - (h + 1) * ROW - shift
        color = HEAD_COLORS[h // group]
        box(ax, left, y, WIDTH, HEIGHT, f"q head {h}", color=color, text_color="white", fontsize=8)
    label(ax, (left + WIDTH / 2, height - 0.45), "q: (B, H, T, d_head)", fontsize=9)
    middle = top - body / 2
    # the gap is wider than the reshape's label, so the label clears both columns' boxes
    arrow(ax, (left + WIDTH + 0.2, middle), (left + WIDTH + 4.9, middle))
    label(ax, (left + WIDTH + 2.55, middle + 0.4), ".reshape(B, H_kv, G * T, d_head)", fontsize=8)

    # column 2: q as (B, H_kv, G, T, d_head), one block of G boxes per key/value head
    left = 8.0
    for h in range(n_heads):
        g, i = divmod(h, group)
        text = f"[{g}, {i}] = head {h}"
        color = HEAD_COLORS[g]
        box(
            ax, left, grouped_y(h), WIDTH, HEIGHT, text, color=color, text_color="white", fontsize=8
        )
    label(ax, (left + WIDTH / 2, height - 0.45), "q: (B, H_kv, G * T, d_head)", fontsize=9)

    # column 3: one key/value head per group, read by every query head of the group
    kv_left = left + WIDTH + 2.6
    for g in range(n_kv_heads):
        block_top = grouped_y(g * group) + HEIGHT
        block_bottom = grouped_y((g + 1) * group - 1)
        box(
            ax,
            kv_left,
            block_bottom,
            KV_WIDTH,
            block_top - block_bottom,
            f"k, v head {g}\n(S, d_head)",
            color=HEAD_COLORS[g],
            text_color="white",
            fontsize=8,
        )
        for h in range(g * group, (g + 1) * group):
            y = grouped_y(h) + HEIGHT / 2
            arrow(ax, (left + WIDTH + 0.1, y), (kv_left - 0.1, y), color=HEAD_COLORS[g])
    label(
        ax,
        (kv_left + KV_WIDTH / 2, height - 0.45),
        "k, v: (B, H_kv, S, d_head)",
        fontsize=9,
    )
    label(
        ax,
        (width / 2, 0.9),
        f"H = {n_heads}, H_kv = {n_kv_heads}, G = {group}: each key/value head is stored once "
        f"and read by the {group} query head{'s' if group > 1 else ''} of its group",
        fontsize=9,
    )
    label(
        ax,
        (width / 2, 0.4),
        "each box is one query head's T rows (T, d_head); "
        "[g, i] = the i-th query head of group g, which reads key/value head g",
        fontsize=9,
    )
    return ax.figure
