"""Chapter 15's gain bars: grouped bars, one standard error either side, a zero line."""

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.container import BarContainer

from attnbook.book.plotting import plot_gains

matplotlib.use("Agg")

GAINS = {
    "plain": {"BOS": (0.05, 0.01), "key 8": (-0.06, 0.007)},
    "gated": {"BOS": (0.006, 0.008), "key 8": (-0.05, 0.007)},
}


def test_plot_gains_draws_one_bar_per_series_and_category_with_its_error():
    ax = plot_gains(GAINS, title="window 16")
    heights = [bar.get_height() for bar in ax.patches]
    assert heights == pytest.approx([0.05, -0.06, 0.006, -0.05])
    centres = [bar.get_x() + bar.get_width() / 2 for bar in ax.patches]
    assert centres == pytest.approx([-0.2, 0.8, 0.2, 1.2])  # side by side, grouped
    # each error bar spans mean - error .. mean + error
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    spans = [seg[:, 1] for c in bars for seg in c.errorbar.lines[2][0].get_segments()]
    expected = [(0.04, 0.06), (-0.067, -0.053), (-0.002, 0.014), (-0.057, -0.043)]
    np.testing.assert_allclose(spans, expected)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["BOS", "key 8"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["plain", "gated"]
    assert any(list(line.get_ydata()) == [0.0, 0.0] for line in ax.lines)  # the zero line
    assert ax.get_title() == "window 16" and ax.get_ylabel() == "loss saved (nats)"
    plt.close("all")


def test_plot_gains_draws_on_a_given_axes_without_a_legend_for_one_series():
    _, given = plt.subplots()
    ax = plot_gains({"reference": {"key 0": (0.18, 0.03)}}, given, ylabel="gain")
    assert ax is given and ax.get_legend() is None and len(ax.patches) == 1
    assert ax.get_ylabel() == "gain"
    plt.close("all")


@pytest.mark.parametrize(
    ("gains", "message"),
    [
        ({}, "gains: expected a non-empty dict"),
        ([("a", {})], "gains: expected a non-empty dict"),
        ({"a": {}}, r"gains\['a'\]: expected a non-empty dict"),
        ({"a": {"x": (0, 1)}, "b": {"y": (0, 1)}}, r"gains\['b'\]: expected the categories"),
        ({"a": {"x": (0.1,)}}, r"gains\['a'\]\['x'\]: expected \(mean, standard error\)"),
        ({"a": {"x": (0.1, -0.01)}}, r"the error >= 0, got \(0.1, -0.01\)"),
        ({"a": {"x": (math.nan, 0.01)}}, r"gains\['a'\]\['x'\]"),
        ({"a": {"x": ("0.1", 0.01)}}, r"gains\['a'\]\['x'\]"),
    ],
)
def test_plot_gains_rejects_bad_gains_by_name(gains, message):
    with pytest.raises(ValueError, match=message):
        plot_gains(gains)
