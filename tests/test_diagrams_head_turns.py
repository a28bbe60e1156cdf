"""Chapter 13's head-turns diagram: one arc per query back to its key, coloured by its head."""

import matplotlib
import pytest
from helpers import figure_texts, raises
from matplotlib.colors import to_hex
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.book.diagrams import head_turns
from attnbook.book.diagrams.heads import HEAD_COLORS

matplotlib.use("Agg")


@pytest.mark.parametrize(
    ("turns", "n_heads", "windows"),
    [
        ((2, 0, 1, 2, 1, 0, 2), 3, ("In the b", "And God ")),
        ((0,), 1, ("ab", "c ")),
        ((6, 5, 4), 7, ("LORD", "said")),
    ],
)
def test_every_query_has_one_arc_in_its_heads_colour_in_both_windows(turns, n_heads, windows):
    figure = head_turns(turns=turns, n_heads=n_heads, windows=windows)
    ax = figure.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    arcs = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    texts = figure_texts(figure)
    assert len(boxes) == 2 * (len(turns) + 1)  # one box per character of each window
    assert len(arcs) == 2 * len(turns)
    expected = [to_hex(HEAD_COLORS[head]) for head in turns] * 2  # the same in both windows
    assert [to_hex(arc.get_edgecolor()) for arc in arcs] == expected
    assert [text for text in texts if text.startswith("H")] == [f"H{h}" for h in turns] * 2
    for text in windows:
        for character in text:
            assert ("␣" if character == " " else character) in texts
    assert [f"t = {t}" for t in range(len(turns) + 1)] == [
        text for text in texts if text.startswith("t = ")
    ]
    for arc in arcs:
        (x0, _), (x1, _) = arc._posA_posB  # from the query back to the key on its left
        assert x1 < x0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_heads": 0}, "n_heads: expected an int in [1, 7], got 0"),
        ({"n_heads": 2}, "turns[0]: expected an int in [0, 1], got 2"),
        ({"turns": ()}, "turns: expected a tuple of 1 to 12 head indices, got ()"),
        ({"turns": (0, -1), "windows": ("abc", "def")}, "turns[1]: expected an int in [0, 2]"),
        ({"windows": ("short", "And God ")}, "windows: expected two texts of len(turns) + 1 = 8"),
        ({"windows": ("In the b",)}, "windows: expected two texts"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with raises(message):
        head_turns(**kwargs)
