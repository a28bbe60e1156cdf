"""The schematic diagrams: each renders, renders the same twice, and carries its labels."""

import io

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt

from attnbook.book import diagrams
from attnbook.book.diagrams._draw import arrow, box, canvas, label

matplotlib.use("Agg")


def png_bytes(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def test_primitives_place_their_text_and_patches():
    ax = canvas(4, 2)
    box(ax, 0.5, 0.5, 1, 1, "q")
    arrow(ax, (1.5, 1.0), (3.0, 1.0), "W_q")
    label(ax, (3.5, 1.5), "out")
    assert figure_texts(ax.figure) == ["q", "W_q", "out"]
    assert len(ax.patches) == 2
    assert ax.get_xlim() == (0, 4) and not ax.axison
    plt.close(ax.figure)


@pytest.mark.parametrize("name", diagrams.__all__)
def test_every_diagram_renders_the_same_twice(name):
    draw = getattr(diagrams, name)
    first, second = png_bytes(draw()), png_bytes(draw())
    assert first.startswith(b"\x89PNG") and first == second
