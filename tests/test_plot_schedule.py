"""Chapter 17's batching Gantt chart: requests as rows, decoding steps as columns."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from attnbook.book.plotting import plot_schedule

matplotlib.use("Agg")

# two slots, three requests: 0 and 1 together, 1 done a step early (padding), then 2
STATIC = [{0: True, 1: True}, {0: True, 1: False}, {2: True}]
CONTINUOUS = [{0: True, 1: True}, {0: True, 2: True}]


def test_plot_schedule_draws_each_cell_state_and_the_useful_share():
    fig = plot_schedule({"static": STATIC, "continuous": CONTINUOUS}, 3, 2)
    gantt_static, gantt_continuous, useful = fig.axes
    # 0 finished, 1 waiting, 2 decoding, 3 padding
    expected_static = [[2, 2, 0], [2, 3, 0], [1, 1, 2]]
    np.testing.assert_array_equal(gantt_static.images[0].get_array(), expected_static)
    expected_continuous = [[2, 2], [2, 0], [1, 2]]
    np.testing.assert_array_equal(gantt_continuous.images[0].get_array(), expected_continuous)
    assert gantt_static.get_title() == "static: 3 steps, 4 of 6 slots decode a kept token"
    assert gantt_continuous.get_title() == "continuous: 2 steps, 4 of 4 slots decode a kept token"
    assert gantt_continuous.get_xlim() == (-0.5, 2.5)  # both panels span the longer run
    shares = [list(line.get_ydata()) for line in useful.lines]
    assert shares == [[1.0, 0.5, 0.5], [1.0, 1.0]]
    assert [t.get_text() for t in useful.get_legend().get_texts()] == ["static", "continuous"]
    plt.close(fig)


def test_plot_schedule_shows_a_preempted_request_waiting_between_its_rows():
    fig = plot_schedule({"tight": [{0: True}, {1: True}, {0: True}]}, 2, 1)
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), [[2, 1, 2], [1, 2, 0]])
    plt.close(fig)


@pytest.mark.parametrize(
    ("schedules", "n_requests", "max_batch", "message"),
    [
        ({}, 3, 2, "schedules: expected a non-empty dict"),
        ({"a": []}, 3, 2, "schedules: 'a' should list at least one step"),
        ({"a": [{0: True, 1: True, 2: True}]}, 3, 2, r"step 0 of 'a'.*max_batch = 2"),
        ({"a": [{0: True}, {3: True}]}, 3, 2, r"step 1 of 'a'.*n_requests = 3\), got \[3\]"),
        ({"a": STATIC}, 0, 2, "n_requests"),
        ({"a": STATIC}, 3, 0, "max_batch"),
    ],
)
def test_plot_schedule_bad_arguments_name_themselves(schedules, n_requests, max_batch, message):
    with pytest.raises(ValueError, match=message):
        plot_schedule(schedules, n_requests, max_batch)
