"""Chapter 14's induction-circuit diagram: its three steps, their colours, and clear errors."""

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.book.diagrams import induction_circuit
from attnbook.book.diagrams._draw import BLUE, GREEN, ORANGE

matplotlib.use("Agg")


def _parts(figure):
    """(box texts and colours, arrows as (colour, dashed)) of the diagram, figure closed."""
    ax = figure.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    colours = [to_hex(b.get_facecolor()) for b in boxes]
    drawn = [(to_hex(a.get_edgecolor()), a.get_linestyle() in ("--", "dashed")) for a in arrows]
    plt.close(figure)
    return colours, drawn


def test_the_diagram_names_each_step_of_the_circuit():
    texts = figure_texts(induction_circuit())
    for expected in [
        "... A B ... A → ?",
        "B\nprevious = A",
        "layer 0, previous-token head:\nB's position reads A",
        "layer 1, QK: query A\nmatches key 'previous = A'",
        "layer 1, OV: copy B",
        "predict B",
        "position i",
        "position i + 1",
        "position t",
    ]:
        assert expected in texts
    assert texts.count("A") == 2 and texts.count("B") == 1  # the tokens row


def test_each_head_has_its_colour_and_the_match_is_dashed():
    colours, arrows = _parts(induction_circuit())
    # three tokens, then what layer 0 writes at i + 1 (orange) and the prediction (green)
    assert colours[3:] == [to_hex(ORANGE), to_hex(GREEN)]
    assert len(colours) == 5
    # layer 0 (orange), the query (blue), the QK match (blue, dashed), the OV copy (green)
    assert arrows == [
        (to_hex(ORANGE), False),
        (to_hex(BLUE), False),
        (to_hex(BLUE), True),
        (to_hex(GREEN), False),
    ]


def test_the_tokens_follow_the_arguments():
    texts = figure_texts(induction_circuit(first="the", second="cat"))
    assert "... the cat ... the → ?" in texts and "predict cat" in texts
    assert "cat\nprevious = the" in texts and "A" not in texts


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"first": ""}, "first: expected a label of 1 to 3 characters, got ''"),
        ({"second": "long"}, "second: expected a label of 1 to 3 characters, got 'long'"),
        ({"first": 1}, "first: expected a label of 1 to 3 characters, got 1"),
        ({"second": "A"}, "first, second: expected two different tokens, got 'A' twice"),
    ],
)
def test_bad_tokens_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        induction_circuit(**kwargs)
