"""Chapter 17's picture: sequences' block tables pointing into one pool of KV blocks."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, LIGHT, ORANGE, arrow, box, canvas, label

SEQUENCE_COLORS = (BLUE, ORANGE)
# chapter 17's allocator trace after "A grows by 5": block 0 shared, block 1 A's, 2 B's copy
DEFAULT_TABLES = {"A": [0, 1, 3], "B": [0, 2]}
DEFAULT_LENGTHS = {"A": 11, "B": 7}


def block_tables(
    *,
    tables: dict[str, list[int]] | None = None,
    lengths: dict[str, int] | None = None,
    n_blocks: int = 8,
    block_size: int = 4,
) -> Figure:
    """Each sequence's logical blocks (top, side by side) and the pool (bottom), with arrows.

    ``tables`` maps a sequence's name to its block table, ``lengths`` to its number of cached
    positions. A pool block is coloured by the sequence that owns it, grey when several share
    it (with its reference count) and white when free. Logical block i of a sequence covers
    positions i * block_size to (i + 1) * block_size - 1 and shows how many of them are filled.
    """
    tables = DEFAULT_TABLES if tables is None else tables
    lengths = DEFAULT_LENGTHS if lengths is None else lengths
    if not 1 <= len(tables) <= len(SEQUENCE_COLORS):
        raise ValueError(f"tables: expected 1 or 2 sequences, got {len(tables)}")
    counts = [0] * n_blocks
    for table in tables.values():
        for block in table:
            if not 0 <= block < n_blocks:
                raise ValueError(f"tables: block {block} is not in a pool of {n_blocks} blocks")
            counts[block] += 1
    width = 1.3 * max(n_blocks, sum(len(t) for t in tables.values()) + 1) + 1.6
    ax = canvas(width, 5.2, inches_per_unit=0.7)
    label(ax, (0.7, 1.0), "pool", fontsize=10)
    owners = {}
    for table, color in zip(tables.values(), SEQUENCE_COLORS, strict=False):
        for block in table:
            owners[block] = color if counts[block] == 1 else LIGHT
    for block in range(n_blocks):
        x = 1.6 + 1.3 * block
        color = owners.get(block, "white")
        text = f"block {block}" + (f"\nref {counts[block]}" if counts[block] > 1 else "")
        text = text if counts[block] else f"block {block}\nfree"
        dark = color in SEQUENCE_COLORS
        box(
            ax,
            x,
            0.5,
            1.1,
            1.0,
            text,
            color=color,
            text_color="white" if dark else "black",
            fontsize=8,
        )
    # the sequences sit side by side in one row, so no arrow crosses another sequence's box
    start = 1.6
    for (name, table), color in zip(tables.items(), SEQUENCE_COLORS, strict=False):
        y = 3.6
        label(ax, (start + 0.55, y + 1.1), f"seq {name}", fontsize=10, color=color)
        for index, block in enumerate(table):
            filled = min(block_size, max(0, lengths[name] - index * block_size))
            x = start + 1.3 * index
            box(
                ax,
                x,
                y,
                1.1,
                0.8,
                f"{name}{index}: {filled}/{block_size}",
                color="white",
                fontsize=8,
            )
            arrow(ax, (x + 0.55, y), (1.6 + 1.3 * block + 0.55, 1.5), color=color)
        start += 1.3 * len(table) + 0.6
    return ax.figure
