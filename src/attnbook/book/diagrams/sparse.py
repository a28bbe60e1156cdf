"""Chapter 19's picture: the keys one query reads under MoBA, a lightning indexer and NSA."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, GREEN, LIGHT, ORANGE, PINK, SKY, box, canvas, label


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
        ("indexer", indexer, ORANGE, "top-k tokens by index score I(t, s)"),
        ("NSA selected", moba, GREEN, "top blocks by compressed weights"),
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
