"""Chapter 0's one-row picture: the bars are the numbers given, the output is their sum, and
bad rows are refused before anything is drawn."""

import matplotlib
import pytest
import torch
from matplotlib import pyplot as plt

from attnbook.book.query_row import plot_query_row

matplotlib.use("Agg")
LABELS = ["a", "b", "c"]


def _heights(ax):
    return [round(p.get_height(), 6) for p in ax.patches]


def test_the_panels_draw_scores_weights_and_weighted_values():
    scores = torch.tensor([0.0, 2.0, -1.0])
    weights = scores.softmax(-1)
    values = torch.tensor([0.0, 1.0, 2.0])
    figure = plot_query_row(scores, weights, values, LABELS, query_label="q")
    top, middle, bottom = figure.axes
    assert _heights(top) == [0.0, 2.0, -1.0]
    assert _heights(middle) == [round(w, 6) for w in weights.tolist()]
    assert _heights(bottom) == [round(p, 6) for p in (weights.double() * values).tolist()]
    output = (weights * values).sum().item()
    assert f"{output:.3g}" in bottom.get_title()
    assert [t.get_text() for t in bottom.get_xticklabels()][1] == "b\n$v$ = 1"
    assert top.get_ylabel() == "score $q \\cdot k_j / \\sqrt{d}$"
    assert bottom.get_title().startswith("output = sum of the bars")
    plt.close(figure)


def test_the_width_and_the_output_can_be_named():
    scores = torch.tensor([0.0, 2.0, -1.0])
    figure = plot_query_row(
        scores,
        scores.softmax(-1),
        torch.tensor([0.0, 1.0, 2.0]),
        LABELS,
        query_label="q",
        width_label="d_\\text{head}",
        output_label="output's first feature",
    )
    top, _, bottom = figure.axes
    assert top.get_ylabel() == "score $q \\cdot k_j / \\sqrt{d_\\text{head}}$"
    assert bottom.get_title().startswith("output's first feature = sum of the bars = ")
    plt.close(figure)


@pytest.mark.parametrize(
    ("scores", "weights", "values", "labels", "match"),
    [
        ([[1.0]], [1.0], [1.0], ["a"], "scores: expected a non-empty 1-D row"),
        ([1.0], [float("nan")], [1.0], ["a"], "weights: .*finite"),
        ([1.0], [1.0], [], ["a"], "values: expected a non-empty"),
        ([1.0, 2.0], [0.5, 0.5], [1.0, 2.0], ["a"], "key_labels: .*lengths 2, 2, 2 and 1"),
    ],
)
def test_bad_rows_are_refused_before_drawing(scores, weights, values, labels, match):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match=match):
        plot_query_row(scores, weights, values, labels, query_label="q")
    assert plt.get_fignums() == before
