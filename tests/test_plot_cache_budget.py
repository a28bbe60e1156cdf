"""Chapter 6's cache-against-memory figure: one line per model, the budget, who fits."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from attnbook.book.plotting import plot_cache_budget

matplotlib.use("Agg")

GIB = 2**30


def test_plot_cache_budget_draws_each_model_the_budget_and_how_many_fit():
    fig = plot_cache_budget(
        {"big": 2 * GIB, "small": GIB // 2}, 9 * GIB, "9 GiB budget", max_sequences=10
    )
    (ax,) = fig.axes
    big_line, big_dot, small_line, budget = ax.lines  # small's 18 fit lie off the axis: no dot
    np.testing.assert_allclose(big_line.get_ydata(), [0, 20])  # 2 GiB x 0 and 10 sequences
    np.testing.assert_allclose(small_line.get_ydata(), [0, 5])
    assert (big_dot.get_xdata()[0], big_dot.get_ydata()[0]) == (4, 8.0)  # 4 whole ones fit
    np.testing.assert_allclose(budget.get_ydata(), [9, 9])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["big: 4 fit", "small: 18 fit", "9 GiB budget"]
    assert ax.get_xlim() == (0, 10)
    plt.close(fig)


def test_plot_cache_budget_draws_models_that_cache_alike_as_one_line():
    fig = plot_cache_budget({"a": GIB, "b": 2 * GIB, "c": GIB}, 4 * GIB, "budget", 8)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["a and c: 4 fit", "b: 2 fit", "budget"]
    assert len(fig.axes[0].lines) == 5  # two lines, their two dots, the budget
    plt.close(fig)


@pytest.mark.parametrize(
    ("sizes", "memory", "max_sequences", "message"),
    [
        ({}, GIB, 4, "bytes_per_sequence: expected a non-empty dict"),
        ({"a": 0}, GIB, 4, r"bytes_per_sequence\['a'\]: expected a positive int, got 0"),
        ({"a": 1.5}, GIB, 4, r"bytes_per_sequence\['a'\]"),
        ({"a": GIB}, 0, 4, "memory_bytes: expected a positive int, got 0"),
        ({"a": GIB}, GIB, 0, "max_sequences: expected a positive int, got 0"),
    ],
)
def test_plot_cache_budget_bad_arguments_name_themselves(sizes, memory, max_sequences, message):
    with pytest.raises(ValueError, match=message):
        plot_cache_budget(sizes, memory, "budget", max_sequences)
