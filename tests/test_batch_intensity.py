"""Chapter 8's batching figure: the intensity formula, its two regimes and the drawing."""

import matplotlib
import numpy as np
import pytest
from matplotlib import pyplot as plt

from attnbook.book.batch_intensity import plot_intensity_vs_batch, step_intensity

matplotlib.use("Agg")


def test_intensity_by_hand():
    # 10 FLOP per sequence, 4 bytes of weights, 1 byte of cache per sequence
    values = step_intensity([1, 4, 12], flops=10.0, weight_bytes=4.0, cache_bytes=1.0)
    np.testing.assert_allclose(values, [10 / 5, 40 / 8, 120 / 16])


def test_intensity_grows_with_the_batch_then_levels_off_at_flops_per_cache_byte():
    batch = 2 ** np.arange(0, 21)
    values = step_intensity(batch, flops=1e9, weight_bytes=1e9, cache_bytes=1e6)
    assert (np.diff(values) > 0).all()
    # small batches: the weights dominate, so doubling the batch nearly doubles the intensity
    assert values[1] / values[0] == pytest.approx(2, rel=1e-3)
    # huge batches: the caches dominate, the intensity approaches flops / cache_bytes
    assert values[-1] == pytest.approx(1e9 / 1e6, rel=1e-3)
    assert (values < 1e9 / 1e6).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_sizes=[1, 2], flops=0.0), "flops: expected a finite number > 0, got 0.0"),
        (dict(batch_sizes=[], flops=1.0), "batch_sizes: expected a non-empty sequence"),
        (dict(batch_sizes=[0, 2], flops=1.0), "batch_sizes: expected a non-empty sequence"),
        (dict(batch_sizes=[1], flops=1.0, cache_bytes=-1.0), "cache_bytes: expected a finite"),
    ],
)
def test_intensity_refuses_bad_input_by_name(kwargs, message):
    arguments = dict(weight_bytes=1.0, cache_bytes=1.0) | kwargs
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        step_intensity(**arguments)


def test_plot_draws_each_curve_its_ceiling_and_the_ridge():
    batch = [1, 2, 4]
    fig = plot_intensity_vs_batch(
        batch, {"a": ([1.0, 2.0, 3.0], 4.0), "b": ([0.5, 0.7, 0.8], 1.0)}, 300.0, "H100"
    )
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == [
        "a",
        "its ceiling, 4 FLOP/B",
        "b",
        "its ceiling, 1 FLOP/B",
        "ridge point of H100: 300",
    ]
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), [1.0, 2.0, 3.0])
    assert ax.get_lines()[1].get_ydata()[0] == 4.0
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["1", "2", "4"]
    plt.close(fig)


@pytest.mark.parametrize(
    "curves, ridge, message",
    [
        ({}, 1.0, "curves: expected a non-empty dict"),
        ({"a": ([1.0], 2.0)}, 1.0, r"curves\['a'\]: expected 2 values, one per batch size, got 1"),
        ({"a": ([1.0, 2.0], 0.0)}, 1.0, r"curves\['a'\] ceiling: expected a finite number > 0"),
        ({"a": ([1.0, 2.0], 2.0)}, -3.0, "ridge: expected a finite number > 0, got -3.0"),
    ],
)
def test_plot_refuses_bad_input_by_name(curves, ridge, message):
    with pytest.raises(ValueError, match=message):
        plot_intensity_vs_batch([1, 2], curves, ridge, "H100")
    plt.close("all")


def test_plot_marks_the_largest_batch_that_fits():
    fig = plot_intensity_vs_batch(
        [1, 2, 4], {"a": ([1.0, 2.0, 3.0], 4.0)}, 300.0, "H100", largest_fitting={"a": 3}
    )
    lines = fig.axes[0].get_lines()
    marker = [line for line in lines if line.get_label() == "fits up to batch 3"]
    assert len(marker) == 1 and list(marker[0].get_xdata()) == [3, 3]
    plt.close(fig)


@pytest.mark.parametrize(
    "largest_fitting, message",
    [
        ({"b": 3}, r"largest_fitting: expected labels of curves \['a'\], got \['b'\]"),
        ({"a": 0}, r"largest_fitting\['a'\]: expected a finite number > 0, got 0"),
    ],
)
def test_plot_refuses_a_bad_largest_batch(largest_fitting, message):
    with pytest.raises(ValueError, match=message):
        plot_intensity_vs_batch(
            [1, 2], {"a": ([1.0, 2.0], 4.0)}, 300.0, "H100", largest_fitting=largest_fitting
        )
    plt.close("all")
