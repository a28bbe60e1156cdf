"""plot_grouped_bars: one bar per row and series, at its value, labelled; bad input refused."""

import matplotlib
import pytest
from matplotlib import pyplot as plt

from attnbook.book.plotting import OKABE_ITO, plot_grouped_bars

matplotlib.use("Agg")


def test_each_bar_sits_at_its_value_in_its_series_colour_with_its_label():
    values = {"dense": [0.856, 0.676], "moba": [0.164, 0.154], "indexer": [0.876, 0.822]}
    ax = plot_grouped_bars(values, ["seed0", "seed1"], xlabel="accuracy")
    for i, container in enumerate(ax.containers):
        widths = [patch.get_width() for patch in container]
        assert widths == [row[i] for row in values.values()]
        assert all(
            patch.get_facecolor()[:3] == matplotlib.colors.to_rgb(OKABE_ITO[i])
            for patch in container
        )
    # rows top to bottom in the dict's order: the first row's bars lie highest
    first, last = ax.containers[0][0], ax.containers[0][-1]
    assert first.get_y() < last.get_y() and ax.yaxis_inverted()
    assert [t.get_text() for t in ax.get_yticklabels()] == list(values)
    assert "0.164" in [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["seed0", "seed1"]
    plt.close(ax.figure)


@pytest.mark.parametrize(
    "values, series, message",
    [
        ({}, ["a"], "values: expected a non-empty dict"),
        ({"x": [1.0]}, [], "series: expected a non-empty sequence"),
        ({"x": [1.0]}, "ab", "series: expected a non-empty sequence"),
        ({"x": [1.0]}, ["a", "b"], "row 'x' needs 2 finite numbers"),
        ({"x": [1.0, float("nan")]}, ["a", "b"], "row 'x' needs 2 finite numbers"),
    ],
)
def test_bad_input_is_refused_by_name(values, series, message):
    with pytest.raises(ValueError, match=message):
        plot_grouped_bars(values, series)
