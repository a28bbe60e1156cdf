"""Chapter 13's head turns: layer 0's previous-character heads share the window by position.

Two windows of text, one above the other, the same positions in both. Above each character an
arc runs from the query at position t back to its key t - 1, coloured by the head that takes
query t. Both windows get the same colours at the same positions, whatever their characters:
which head looks back is decided by the query's position in the window (its position
embedding), and the heads take turns along it.
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import LIGHT, arrow, box, canvas, label
from attnbook.book.diagrams.heads import HEAD_COLORS
from attnbook.core._checks import check_int

STEP = 1.1  # distance between two positions
ROW = 2.6  # distance between the two windows' rows
LEFT = 1.7  # room for the row labels


def _check_turns(turns: object, n_heads: int) -> None:
    """``turns``: a non-empty tuple or list of head indices in [0, n_heads - 1], at most 12."""
    if not isinstance(turns, tuple | list) or not 1 <= len(turns) <= 12:
        raise ValueError(f"turns: expected a tuple of 1 to 12 head indices, got {turns!r}")
    for index, head in enumerate(turns):
        check_int(f"turns[{index}]", head, low=0, high=n_heads - 1)


def head_turns(
    *,
    turns: tuple[int, ...] = (2, 0, 1, 2, 1, 0, 2),
    n_heads: int = 3,
    windows: tuple[str, str] = ("In the b", "And God "),
) -> Figure:
    """Draw query t -> key t - 1 in two windows, the arc of query t in head turns[t - 1]'s colour.

    ``windows``: two texts of len(turns) + 1 characters each, drawn one above the other.
    """
    check_int("n_heads", n_heads, high=len(HEAD_COLORS))
    _check_turns(turns, n_heads)
    if (
        not isinstance(windows, tuple | list)
        or len(windows) != 2
        or not all(isinstance(text, str) and len(text) == len(turns) + 1 for text in windows)
    ):
        raise ValueError(
            f"windows: expected two texts of len(turns) + 1 = {len(turns) + 1} characters, "
            f"got {windows!r}"
        )
    width = LEFT + (len(turns) + 1) * STEP + 0.4
    height = 2 * ROW + 0.6
    ax = canvas(width, height, inches_per_unit=0.55)
    for row, text in enumerate(windows):
        y = 0.5 + (1 - row) * ROW  # the bottom of this window's boxes
        label(ax, (0.1, y + 0.35), f"window {row + 1}", ha="left", fontsize=9)
        for position, character in enumerate(text):
            x = LEFT + position * STEP
            shown = "␣" if character == " " else character
            box(ax, x, y, 0.8, 0.7, shown, color=LIGHT, fontsize=11)
            if row == 1:
                label(ax, (x + 0.4, y - 0.3), f"t = {position}", fontsize=8)
        for query, head in enumerate(turns, start=1):
            start = (LEFT + query * STEP + 0.4, y + 0.75)
            end = (LEFT + (query - 1) * STEP + 0.4, y + 0.75)
            arrow(ax, start, end, color=HEAD_COLORS[head], curve=0.8)
            middle = (LEFT + (query - 0.5) * STEP + 0.4, y + 1.35)
            label(ax, middle, f"H{head}", fontsize=8, color=HEAD_COLORS[head])
    label(
        ax,
        (width / 2, height - 0.3),
        "query t looks at key t - 1; the head that does it is set by t, not by the characters",
        fontsize=9,
    )
    return ax.figure
