"""Chapter 6's query-groups diagram: the reshape's labels, the colours and arrows of the groups."""

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.book.diagrams import query_groups
from attnbook.book.diagrams.heads import HEAD_COLORS

matplotlib.use("Agg")


def test_the_columns_and_the_reshape_are_labelled():
    labels = figure_texts(query_groups(n_heads=8, n_kv_heads=2))
    for expected in [
        "q: (B, H, T, d_head)",
        ".reshape(B, H_kv, G * T, d_head)",
        "q: (B, H_kv, G * T, d_head)",
        "k, v: (B, H_kv, S, d_head)",
        "q head 7",
        "[0, 3] = head 3",
        "[1, 0] = head 4",
        "k, v head 1\n(S, d_head)",
        "each box is one query head's T rows (T, d_head); "
        "[g, i] = the i-th query head of group g, which reads key/value head g",
    ]:
        assert expected in labels
    assert "[1, 0] = head 3" not in labels  # head 3 is the last of group 0, not the first of 1


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(8, 2), (8, 1), (4, 4), (12, 3)])
def test_every_query_head_is_coloured_and_wired_to_its_own_kv_head(n_heads, n_kv_heads):
    figure = query_groups(n_heads=n_heads, n_kv_heads=n_kv_heads)
    ax = figure.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    plt.close(figure)
    group = n_heads // n_kv_heads
    assert len(boxes) == 2 * n_heads + n_kv_heads
    colours = [to_hex(b.get_facecolor()) for b in boxes]
    by_head = [to_hex(HEAD_COLORS[h // group]) for h in range(n_heads)]
    assert colours[: 2 * n_heads] == by_head + by_head
    assert colours[2 * n_heads :] == [to_hex(HEAD_COLORS[g]) for g in range(n_kv_heads)]
    kv_boxes = boxes[2 * n_heads :]
    reads = arrows[1:]  # the first arrow is the reshape's
    assert len(reads) == n_heads
    for h, read in enumerate(reads):
        (_, y_start), (_, y_end) = read._posA_posB
        kv = kv_boxes[h // group]
        # horizontal, from the grouped query box to inside its own key/value head's box
        assert y_start == y_end
        assert kv.get_y() < y_end < kv.get_y() + kv.get_height()
        assert to_hex(read.get_edgecolor()) == to_hex(HEAD_COLORS[h // group])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_heads": 8, "n_kv_heads": 3}, "n_heads: 8 is not divisible by n_kv_heads = 3"),
        ({"n_heads": 8, "n_kv_heads": 8}, r"n_kv_heads: expected an int in \[1, 7\], got 8"),
        ({"n_heads": 0}, r"n_heads: expected an int in \[1, 16\], got 0"),
        ({"n_heads": 4.0}, r"n_heads: expected an int in \[1, 16\], got 4.0"),
    ],
)
def test_bad_sizes_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        query_groups(**kwargs)


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(8, 2), (8, 1), (16, 4)])
def test_the_reshape_label_clears_every_box_and_stays_on_the_figure(n_heads, n_kv_heads):
    figure = query_groups(n_heads=n_heads, n_kv_heads=n_kv_heads)
    renderer = figure.canvas.get_renderer()
    figure.canvas.draw()
    ax = figure.axes[0]
    (reshape,) = [t for t in ax.texts if t.get_text().startswith(".reshape")]
    # a line's height of white space on every side, so no renderer's rounding makes them touch
    extent = reshape.get_window_extent(renderer)
    extent = extent.padded(extent.height)
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    overlapped = [b for b in boxes if extent.overlaps(b.get_window_extent(renderer))]
    on_figure = figure.bbox.x0 <= extent.x0 and extent.x1 <= figure.bbox.x1
    plt.close(figure)
    assert not overlapped
    assert on_figure


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(8, 2), (16, 4)])
def test_the_footer_explaining_the_labels_stays_below_every_box_and_on_the_figure(
    n_heads, n_kv_heads
):
    figure = query_groups(n_heads=n_heads, n_kv_heads=n_kv_heads)
    renderer = figure.canvas.get_renderer()
    figure.canvas.draw()
    ax = figure.axes[0]
    (footer,) = [t for t in ax.texts if t.get_text().startswith("each box is")]
    extent = footer.get_window_extent(renderer)
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    lowest = min(b.get_window_extent(renderer).y0 for b in boxes)
    on_figure = figure.bbox.x0 <= extent.x0 and extent.x1 <= figure.bbox.x1
    plt.close(figure)
    assert extent.y1 < lowest
    assert on_figure
