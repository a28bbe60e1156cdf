"""Chapter 10's picture: the ring, step by step; queries stay, key/value shards move."""

import math

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, GREEN, ORANGE, PINK, arrow, box, canvas, label
from attnbook.core._checks import check_int

SHARD_COLORS = (BLUE, ORANGE, GREEN, PINK)


def _on_circle(cx: float, cy: float, radius: float, slot: float, slots: int) -> tuple[float, float]:
    """The point of a circle at ``slot`` of ``slots`` (0 at the top, clockwise)."""
    angle = math.pi / 2 - 2 * math.pi * slot / slots
    return cx + radius * math.cos(angle), cy + radius * math.sin(angle)


def ring_steps(*, world_size: int = 4) -> Figure:
    """One panel per ring step: P ranks in a circle, each keeping its query shard Q_r.

    At step s rank r holds the key/value shard of rank (r - s) mod P, drawn in that rank's
    colour beside its queries; arrows show the shard moving on to rank r + 1 for the next
    step. After P steps every query shard has met every key/value shard once.
    """
    check_int("world_size", world_size, low=2, high=len(SHARD_COLORS))
    panel, radius = 4.4, 1.35
    ax = canvas(panel * world_size, panel + 0.6, inches_per_unit=0.55)
    for step in range(world_size):
        cx, cy = panel * step + panel / 2, panel / 2
        label(ax, (cx, panel + 0.25), f"step {step}", fontsize=11)
        for rank in range(world_size):
            x, y = _on_circle(cx, cy, radius, rank, world_size)
            source = (rank - step) % world_size
            box(ax, x - 0.62, y - 0.3, 0.58, 0.6, f"Q{rank}", color="white", fontsize=9)
            box(
                ax,
                x + 0.04,
                y - 0.3,
                0.7,
                0.6,
                f"KV{source}",
                color=SHARD_COLORS[source],
                text_color="white",
                fontsize=9,
            )
            if step < world_size - 1:
                arrow(
                    ax,
                    _on_circle(cx, cy, 0.62 * radius, rank + 0.2, world_size),
                    _on_circle(cx, cy, 0.62 * radius, rank + 0.8, world_size),
                    color=SHARD_COLORS[source],
                    curve=-0.35,
                )
        label(ax, (cx, cy), "send on" if step < world_size - 1 else "all met", fontsize=8)
    return ax.figure
