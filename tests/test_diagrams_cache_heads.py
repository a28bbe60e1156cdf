"""Chapter 6's cache-per-token diagram: H_kv keys and H_kv values per token, bytes per token."""

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.patches import FancyBboxPatch

from attnbook import kv_cache_bytes_per_token
from attnbook.book.diagrams import cache_per_token
from attnbook.book.diagrams._draw import BLUE, ORANGE

matplotlib.use("Agg")


def _colours(figure):
    boxes = [p for p in figure.axes[0].patches if isinstance(p, FancyBboxPatch)]
    return [to_hex(b.get_facecolor()) for b in boxes]


@pytest.mark.parametrize(
    ("n_heads", "kv_choices", "n_tokens"), [(8, (8, 2, 1), 4), (4, (2,), 3), (12, (3, 1), 1)]
)
def test_each_token_caches_h_kv_keys_and_h_kv_values(n_heads, kv_choices, n_tokens):
    figure = cache_per_token(n_heads=n_heads, kv_choices=kv_choices, n_tokens=n_tokens)
    colours = _colours(figure)
    plt.close(figure)
    assert colours.count(to_hex(BLUE)) == n_tokens * sum(kv_choices)
    assert colours.count(to_hex(ORANGE)) == n_tokens * sum(kv_choices)
    assert len(colours) == 2 * n_tokens * sum(kv_choices)


def test_rows_name_their_readers_and_footers_the_bytes_of_the_formula():
    figure = cache_per_token(n_heads=8, kv_choices=(8, 2, 1), head_dim=8, element_bytes=4)
    texts = figure_texts(figure)
    plt.close(figure)
    for expected in [
        "multi-head\nH = 8 query heads, H_kv = 8",
        "grouped-query\nH = 8 query heads, H_kv = 2",
        "multi-query\nH = 8 query heads, H_kv = 1",
        "k7 \u2190 q 7",
        "k1 \u2190 q 4-7",
        "v0 \u2190 q 0-3",
        "v0 \u2190 q 0-7",
        "t4",
    ]:
        assert expected in texts
    assert "t5" not in texts
    for n_kv in (8, 2, 1):
        per_token = kv_cache_bytes_per_token(1, n_kv, 8, 4)  # one layer
        footer = (
            f"{2 * n_kv} vectors of 8 numbers per token\n= {per_token} bytes per token and layer"
        )
        assert footer in texts


def test_every_label_stays_on_the_figure():
    figure = cache_per_token()
    renderer = figure.canvas.get_renderer()
    figure.canvas.draw()
    extents = [t.get_window_extent(renderer) for t in figure.axes[0].texts]
    inside = all(
        figure.bbox.x0 <= e.x0
        and e.x1 <= figure.bbox.x1
        and figure.bbox.y0 <= e.y0
        and e.y1 <= figure.bbox.y1
        for e in extents
    )
    plt.close(figure)
    assert inside


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kv_choices": (3,)}, "kv_choices: 3 does not divide n_heads = 8"),
        ({"kv_choices": (16,)}, r"kv_choices: expected an int in \[1, 8\], got 16"),
        ({"kv_choices": ()}, r"kv_choices: expected a non-empty tuple of ints, got \(\)"),
        ({"kv_choices": [2]}, r"kv_choices: expected a non-empty tuple of ints, got \[2\]"),
        ({"n_heads": 0}, r"n_heads: expected an int in \[1, 16\], got 0"),
        ({"n_tokens": 9}, r"n_tokens: expected an int in \[1, 8\], got 9"),
        ({"head_dim": 0}, "head_dim: expected a positive int, got 0"),
        ({"element_bytes": 2.0}, "element_bytes: expected a positive int, got 2.0"),
    ],
)
def test_bad_sizes_are_refused_by_name(kwargs, message):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match=message):
        cache_per_token(**kwargs)
    assert plt.get_fignums() == before
