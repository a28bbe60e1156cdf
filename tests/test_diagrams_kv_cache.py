"""Chapter 8's diagram: the cache over decoding steps, one new score row per step."""

import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from attnbook.book.diagrams import kv_cache_steps
from attnbook.book.diagrams._draw import BLUE, ORANGE


def _cells_of(figure, color):
    """How many square cells of the figure are filled with ``color``."""
    patches = figure.axes[0].patches
    return sum(
        isinstance(p, Rectangle) and to_hex(p.get_facecolor()) == to_hex(color) for p in patches
    )


def test_kv_cache_steps_shows_one_new_row_and_one_new_column_per_step():
    figure = kv_cache_steps()
    shown = figure_texts(figure)
    blue, orange = _cells_of(figure, BLUE), _cells_of(figure, ORANGE)
    plt.close(figure)
    for title in ("step 1: S = 4", "step 2: S = 5", "step 3: S = 6"):
        assert title in shown
    assert "step 4: S = 7" not in shown
    # one score row of S cells per step, and one new key and one new value per step
    assert blue == 4 + 5 + 6
    assert orange == 2 * 3
    assert "q5" in shown and "q6" not in shown
    assert any("no Q cache" in text for text in shown)


def test_kv_cache_steps_follows_its_lengths():
    figure = kv_cache_steps(prompt_len=1, n_steps=2)
    shown = figure_texts(figure)
    blue = _cells_of(figure, BLUE)
    plt.close(figure)
    assert "step 2: S = 3" in shown and "step 3: S = 4" not in shown
    assert blue == 2 + 3


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"prompt_len": 0}, "prompt_len"), ({"n_steps": 5}, "n_steps"), ({"n_steps": 2.0}, "n_steps")],
)
def test_kv_cache_steps_rejects_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=name):
        kv_cache_steps(**kwargs)
