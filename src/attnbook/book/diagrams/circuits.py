"""Chapter 14's induction circuit: two heads in two layers predict the token after an earlier A.

Columns are positions of ``... A B ... A``: ``i`` holds A, ``i + 1`` holds B and ``t``, the
current position, holds A again. Rows, bottom to top, are what each position's residual
stream holds: the tokens, then after layer 0, then the prediction after layer 1. Solid
arrows carry what a head writes (from the position it reads to the one it writes at); the
dashed arrow is layer 1's query-key match:

1. layer 0's previous-token head: position ``i + 1`` reads position ``i`` and writes
   "previous = A" there;
2. layer 1's induction head: the query at ``t`` (token A) matches the key "previous = A" at
   ``i + 1`` (K-composition: the key was written by layer 0);
3. the same head's OV circuit copies B from ``i + 1`` to ``t``: the prediction.
"""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, GREEN, LIGHT, ORANGE, arrow, box, canvas, label

__all__ = ["induction_circuit"]

WIDTH, HEIGHT = 14.5, 7.0
COLUMNS = {"i": 4.5, "i + 1": 7.5, "t": 12.0}  # the centre of each position's column
BOX_WIDTH, BOX_HEIGHT = 2.0, 0.9
ROWS = {"tokens": 0.9, "layer 0": 3.1, "layer 1": 5.3}  # the bottom of each row's boxes


def _check_token(name: str, value: object) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= 3:
        raise ValueError(f"{name}: expected a label of 1 to 3 characters, got {value!r}")


def _stream_box(column: str, row: str, text: str, color: str = LIGHT) -> tuple:
    """Where a box of ``column`` and ``row`` sits: (x, y, width, height, text, color)."""
    return (COLUMNS[column] - BOX_WIDTH / 2, ROWS[row], BOX_WIDTH, BOX_HEIGHT, text, color)


def induction_circuit(*, first: str = "A", second: str = "B") -> Figure:
    """Draw ``... first second ... first -> ?``, the two heads that predict ``second``."""
    _check_token("first", first)
    _check_token("second", second)
    if first == second:
        raise ValueError(f"first, second: expected two different tokens, got {first!r} twice")
    ax = canvas(WIDTH, HEIGHT, inches_per_unit=0.65)
    boxes = [
        _stream_box("i", "tokens", first),
        _stream_box("i + 1", "tokens", second),
        _stream_box("t", "tokens", first),
        _stream_box("i + 1", "layer 0", f"{second}\nprevious = {first}", ORANGE),
        _stream_box("t", "layer 1", f"predict {second}", GREEN),
    ]
    for x, y, width, height, text, color in boxes:
        text_color = "white" if color in (ORANGE, GREEN) else "black"
        box(ax, x, y, width, height, text, color=color, text_color=text_color, fontsize=10)
    for x in (2.8, 9.75):
        label(ax, (x, ROWS["tokens"] + BOX_HEIGHT / 2), "...", fontsize=12)
    for column, x in COLUMNS.items():
        label(ax, (x, ROWS["tokens"] - 0.4), f"position {column}", fontsize=9)
    label(ax, (WIDTH - 0.1, ROWS["tokens"] + BOX_HEIGHT / 2), "→ ?", ha="right", fontsize=12)
    for row, text in zip(ROWS, ("tokens", "after layer 0", "after layer 1"), strict=True):
        label(ax, (0.1, ROWS[row] + BOX_HEIGHT / 2), text, fontsize=9, ha="left")

    top_of = {row: y + BOX_HEIGHT for row, y in ROWS.items()}
    arrow(
        ax,
        (COLUMNS["i"], top_of["tokens"]),
        (COLUMNS["i + 1"] - 0.4, ROWS["layer 0"]),
        f"layer 0, previous-token head:\n{second}'s position reads {first}",
        color=ORANGE,
        fontsize=8,
    )
    arrow(
        ax,
        (COLUMNS["t"], top_of["tokens"]),
        (COLUMNS["t"], ROWS["layer 1"]),
        f"query: {first}",
        color=BLUE,
        fontsize=8,
    )
    arrow(
        ax,
        (COLUMNS["t"] - BOX_WIDTH / 2, ROWS["layer 1"] + 0.2),
        (COLUMNS["i + 1"] + BOX_WIDTH / 2, ROWS["layer 0"] + BOX_HEIGHT / 2),
        f"layer 1, QK: query {first}\nmatches key 'previous = {first}'",
        color=BLUE,
        style="-|>,head_length=0.4,head_width=0.2",
        curve=0.0,
        fontsize=8,
    ).set_linestyle("--")
    arrow(
        ax,
        (COLUMNS["i + 1"], top_of["layer 0"]),
        (COLUMNS["t"] - BOX_WIDTH / 2, ROWS["layer 1"] + BOX_HEIGHT - 0.15),
        color=GREEN,
        curve=-0.3,
    )
    ov_label = (COLUMNS["i + 1"] + 0.3, ROWS["layer 1"] + 0.5)
    label(ax, ov_label, f"layer 1, OV: copy {second}", fontsize=8, color=GREEN, ha="right")
    label(ax, (WIDTH / 2, HEIGHT - 0.35), f"... {first} {second} ... {first} → ?", fontsize=12)
    return ax.figure
