"""Chapter 5's head-split diagram: its labels, one colour per head, and clear errors."""

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.patches import FancyBboxPatch

from attnbook.book.diagrams import head_split, multi_head_overview
from attnbook.book.diagrams.heads import HEAD_COLORS

matplotlib.use("Agg")


def cells(figure) -> list:
    """The feature squares (every box drawn), in drawing order."""
    return [patch for patch in figure.axes[0].patches if isinstance(patch, FancyBboxPatch)]


def test_the_panels_and_operations_are_labelled():
    figure = head_split(n_tokens=3, d_model=12, n_heads=3)
    labels = figure_texts(figure)
    plt.close(figure)
    for expected in [
        "x: (B, T, D) = (1, 3, 12)",
        "(B, T, H, d_head) = (1, 3, 3, 4)",
        "(B, H, T, d_head) = (1, 3, 3, 4)",
        ".view(B, T, H, d_head)",
        ".transpose(1, 2)",
        "head 2: (T, d_head)",
        "token 2",
    ]:
        assert expected in labels
    # every shape drawn is 4-D, like the code's: no panel drops B
    assert not any(text.startswith(("(T,", "(H,", "x: (T")) for text in labels)


@pytest.mark.parametrize(("n_tokens", "d_model", "n_heads"), [(3, 12, 3), (2, 8, 4), (4, 6, 1)])
def test_each_panel_has_every_feature_of_every_token_in_its_heads_colour(
    n_tokens, d_model, n_heads
):
    figure = head_split(n_tokens=n_tokens, d_model=d_model, n_heads=n_heads)
    squares = cells(figure)
    plt.close(figure)
    per_panel = n_tokens * d_model
    assert len(squares) == 3 * per_panel
    d_head = d_model // n_heads
    colours = [to_hex(square.get_facecolor()) for square in squares]
    expected_row = [to_hex(HEAD_COLORS[f // d_head]) for f in range(d_model)]
    # panels 1 and 2 (x, then the view): token by token, features in order
    assert colours[:per_panel] == expected_row * n_tokens
    assert colours[per_panel : 2 * per_panel] == expected_row * n_tokens
    # panel 3 (after the transpose): head by head, each block all in its head's colour
    transposed = [to_hex(HEAD_COLORS[h]) for h in range(n_heads) for _ in range(n_tokens * d_head)]
    assert colours[2 * per_panel :] == transposed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 10, "n_heads": 3}, "d_model: 10 is not divisible by n_heads = 3"),
        ({"n_heads": 0}, "n_heads: expected an int in [1, 7], got 0"),
        ({"n_heads": 8, "d_model": 16}, "n_heads: expected an int in [1, 7], got 8"),
        ({"n_tokens": 2.0}, "n_tokens: expected a positive int, got 2.0"),
    ],
)
def test_bad_sizes_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        head_split(**kwargs)


@pytest.mark.parametrize("n_heads", [1, 3, 7])
def test_the_overview_draws_every_stage_and_one_box_per_head(n_heads):
    figure = multi_head_overview(n_heads=n_heads)
    boxes = cells(figure)
    texts = figure_texts(figure)
    for stage in ["x\n(B, T, D)", "q = x W_q\n(B, T, D)", "k = x W_k\n(B, T, D)"]:
        assert stage in texts
    assert "split\n.view\n.transpose(1, 2)" in texts and "merge\n(concat)\n(B, T, D)" in texts
    head_boxes = [text for text in texts if text.startswith("head ") and "softmax" in text]
    assert head_boxes == [f"head {h}\nsoftmax(q kᵀ/√d_head) v" for h in range(n_heads)]
    head_colours = [to_hex(b.get_facecolor()) for b in boxes[5 : 5 + n_heads]]
    assert head_colours == [to_hex(HEAD_COLORS[h]) for h in range(n_heads)]
    assert len(boxes) == 7 + n_heads  # x, 3 projections, split, heads, merge, W_o


def test_the_overview_refuses_too_many_heads():
    with pytest.raises(ValueError, match=r"n_heads: expected an int in \[1, 7\], got 8"):
        multi_head_overview(n_heads=8)
