"""The KV cache over a few decoding steps: what is reused, what is new (chapter 8)."""

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attnbook.book.diagrams._draw import BLUE, ORANGE, canvas, label
from attnbook.core._checks import check_int

__all__ = ["kv_cache_steps"]

CACHED = "#bbbbbb"  # keys and values read from the cache
EARLIER = "#eeeeee"  # score rows of earlier steps: not recomputed
FADED = "#aaaaaa"  # labels of queries that are not kept
CELL = 0.5


def _cell(ax: Axes, x: float, y: float, color: str, text: str = "") -> None:
    """One square cell with its top-left corner at (x, y)."""
    ax.add_patch(
        Rectangle((x, y - CELL), CELL, CELL, facecolor=color, edgecolor="black", linewidth=0.6)
    )
    if text:
        label(ax, (x + CELL / 2, y - CELL / 2), text, fontsize=7)


def _panel(ax: Axes, left: float, top: float, step: int, length: int) -> None:
    """Step ``step``: the cache holds ``length`` positions, the newest appended now."""
    grid_left = left + 0.6
    label(ax, (grid_left + length * CELL / 2, top + 0.45), f"step {step}: S = {length}")
    for row, name in enumerate(("K", "V")):
        y = top - row * CELL
        label(ax, (grid_left - 0.3, y - CELL / 2), name, fontsize=8)
        for position in range(length):
            new = position == length - 1
            _cell(ax, grid_left + position * CELL, y, ORANGE if new else CACHED, str(position))
    scores_top = top - 2 * CELL - 0.25
    for query in range(length):
        y = scores_top - query * CELL
        new = query == length - 1
        label(
            ax,
            (grid_left - 0.3, y - CELL / 2),
            f"q{query}",
            fontsize=8,
            color="black" if new else FADED,
        )
        for position in range(query + 1):
            _cell(ax, grid_left + position * CELL, y, BLUE if new else EARLIER)


def kv_cache_steps(*, prompt_len: int = 3, n_steps: int = 3) -> Figure:
    """The causal attention of ``n_steps`` decoding steps after a ``prompt_len``-token prefill.

    One panel per step. Top: the K and V columns, grey where they are read from the cache and
    orange for the one position appended at this step. Below: the causal score matrix, queries
    as rows; only the newest query's row (blue) is computed at this step. The earlier rows
    (light) were computed at earlier steps and are not needed again, so neither are their
    queries: there is no Q cache.
    """
    check_int("prompt_len", prompt_len)
    check_int("n_steps", n_steps, high=4)
    longest = prompt_len + n_steps
    panel_width = longest * CELL + 1.0
    height = (longest + 2) * CELL + 2.4
    ax = canvas(n_steps * panel_width + 0.2, height)
    top = height - 0.8
    for step in range(1, n_steps + 1):
        _panel(ax, 0.1 + (step - 1) * panel_width, top, step, prompt_len + step)
    width = n_steps * panel_width + 0.2
    label(
        ax,
        (width / 2, 0.75),
        "grey: K, V read from the cache   orange: K, V appended this step\n"
        "blue: the one score row computed this step   light: rows of earlier steps, "
        "not recomputed",
        fontsize=8,
    )
    label(ax, (width / 2, 0.2), "no Q cache: an earlier query is never used again", fontsize=8)
    return ax.figure
