"""Chapter 19's pictures: the keys one query reads under MoBA, a lightning indexer and NSA; the
indexer's data flow."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import (
    BLUE,
    GREEN,
    LIGHT,
    ORANGE,
    PINK,
    SKY,
    YELLOW,
    arrow,
    box,
    canvas,
    label,
)


def key_selection(*, n_tokens: int = 16, block_size: int = 4) -> Figure:
    """One row of ``n_tokens`` keys per method, the last token being the query; read keys coloured.

    MoBA: blocks of ``block_size``, the own block plus the best earlier block by q . mean key.
    Indexer: any top-k tokens by index score. NSA: the summaries of the complete blocks, the
    query's own included since the query ends it (compressed), the best
    blocks in full (selected) and the last tokens (sliding). The choices drawn are an example.
    """
    if not 2 <= block_size <= n_tokens // 2 or n_tokens % block_size:
        raise ValueError(
            f"block_size: expected a divisor of n_tokens = {n_tokens} in [2, {n_tokens // 2}], "
            f"got {block_size!r}"
        )
    query = n_tokens - 1
    n_blocks = n_tokens // block_size
    chosen_block = 1  # the earlier block MoBA and NSA pick in this example
    moba = {t for t in range(n_tokens) if t // block_size in (chosen_block, n_blocks - 1)}
    indexer = {0, 3, 6, 7, 12, query}
    sliding = set(range(n_tokens - block_size, n_tokens))
    rows = [
        ("MoBA", moba, BLUE, "own block + top blocks by q . mean key"),
        ("indexer", indexer, ORANGE, f"top-k tokens by I(t, s), k = {len(indexer)}"),
        ("NSA selected", moba, GREEN, "top blocks by compressed weights (drawn as MoBA's)"),
        ("NSA sliding", sliding, PINK, "the last w tokens"),
    ]
    width, gap = 0.55, 0.08
    left = 2.6
    ax = canvas(
        left + n_tokens * (width + gap) + 4.6, 1.0 * (len(rows) + 2) + 0.4, inches_per_unit=0.55
    )
    top = len(rows) + 1.4
    label(ax, (left + query * (width + gap) + width / 2, top + 0.75), "query t", fontsize=9)
    for position in range(n_tokens):
        label(
            ax, (left + position * (width + gap) + width / 2, top + 0.35), str(position), fontsize=7
        )
    for row, (name, keys, color, note) in enumerate(rows):
        y = top - row - 0.5
        label(ax, (left - 0.2, y + 0.25), name, fontsize=9, ha="right")
        for position in range(n_tokens):
            read = position in keys
            box(
                ax,
                left + position * (width + gap),
                y,
                width,
                0.5,
                "",
                color=color if read else LIGHT,
            )
        label(ax, (left + n_tokens * (width + gap) + 0.2, y + 0.25), note, fontsize=8, ha="left")
    y = top - len(rows) - 0.5
    label(ax, (left - 0.2, y + 0.25), "NSA compressed", fontsize=9, ha="right")
    # every block is complete: the query is the last token of its own block, so it reads all
    # n_blocks summaries (attnbook.compressed_mask counts a block ending at t as complete at t),
    # each coloured as read
    for block in range(n_blocks):
        x = left + block * block_size * (width + gap)
        span = block_size * (width + gap) - gap
        box(ax, x, y, span, 0.5, f"summary {block}", color=SKY, fontsize=8)
    note = "one key per complete block"
    label(ax, (left + n_tokens * (width + gap) + 0.2, y + 0.25), note, fontsize=8, ha="left")
    return ax.figure


def indexer_flow(*, n_heads: int = 2) -> Figure:
    """The lightning indexer for one query t and one earlier token s, then the top-k and gather.

    Each of ``n_heads`` indexer heads has its own query q^I_{t,j} and weight w_{t,j}; the heads
    share one key k^I_s per token. Head j scores ReLU(q . k / sqrt(d^I)), the weights mix the
    heads into I_{t,s}, and the top k of I_{t,:} pick the latents every attention head reads.
    """
    if not isinstance(n_heads, int) or isinstance(n_heads, bool) or not 1 <= n_heads <= 4:
        raise ValueError(f"n_heads: expected an int in [1, 4], got {n_heads!r}")
    height = 1.4 * n_heads + 3.4
    ax = canvas(17.0, height, inches_per_unit=0.6)
    head_y = [height - 1.3 - 1.4 * j for j in range(n_heads)]  # each head's row
    key_y, weight_y = 0.5, 1.8
    box(ax, 0.2, head_y[0] - 0.1, 1.9, 0.8, "$x_t$ (query)", color=SKY)
    box(ax, 0.2, key_y, 1.9, 0.8, "$x_s$, each $s \\leq t$", color=SKY)
    box(ax, 2.9, weight_y, 1.9, 0.8, "$w_{t,1..H^I}$", color=YELLOW, fontsize=9)
    box(ax, 2.9, key_y, 1.9, 0.8, "$k^I_s$, shared", color=ORANGE, fontsize=9)
    arrow(ax, (2.1, key_y + 0.4), (2.9, key_y + 0.4))
    arrow(ax, (2.1, head_y[0] + 0.2), (2.9, weight_y + 0.6), curve=0.2)
    mixed_y = sum(head_y) / n_heads
    for j, y in enumerate(head_y, start=1):
        box(ax, 2.9, y, 1.9, 0.8, f"$q^I_{{t,{j}}}$", color=ORANGE)
        arrow(ax, (2.1, head_y[0] + 0.3), (2.9, y + 0.4))
        box(ax, 5.6, y, 2.6, 0.8, "ReLU$(q \\cdot k / \\sqrt{d^I})$", fontsize=9)
        arrow(ax, (4.8, y + 0.4), (5.6, y + 0.4))
        arrow(ax, (4.8, key_y + 0.8), (5.6, y), color=ORANGE)
        box(ax, 9.0, y, 1.5, 0.8, f"$\\times\\, w_{{t,{j}}}$", color=YELLOW)
        arrow(ax, (8.2, y + 0.4), (9.0, y + 0.4))
        arrow(ax, (8.6, y + 0.15), (9.0, y + 0.15), color=YELLOW)
        arrow(ax, (10.5, y + 0.4), (11.2, mixed_y + 0.4))
    # the weights run below the ReLU boxes, then up the gap before the multiplications
    bus_y = weight_y + 0.4
    arrow(ax, (4.8, bus_y), (8.6, bus_y), color=YELLOW, style="-")
    arrow(ax, (8.6, bus_y), (8.6, head_y[0] + 0.15), color=YELLOW, style="-")
    box(ax, 11.2, mixed_y, 1.6, 0.8, "$\\sum_j$: $I_{t,s}$")
    box(ax, 13.5, mixed_y, 1.4, 0.8, "top $k$\nover $s$", fontsize=9)
    arrow(ax, (12.8, mixed_y + 0.4), (13.5, mixed_y + 0.4))
    box(ax, 13.2, key_y, 3.6, 1.0, "gather $k$ latents:\nevery head reads them", fontsize=9)
    arrow(ax, (14.2, mixed_y), (14.6, key_y + 1.0))
    return ax.figure
