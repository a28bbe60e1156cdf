"""plot_bits_per_character: one bar per loss, its length the loss in bits, labelled."""

import math

import matplotlib
import numpy as np
import pytest
from matplotlib import pyplot as plt

from attnbook.book.bits_plot import BASELINE_COLOUR, bits_per_character, plot_bits_per_character

matplotlib.use("Agg")

# chapter 12's losses in nats: uniform ln 60, unigram, bigram, the trained MHA model
LOSSES = {"uniform": math.log(60), "unigram": 3.094, "bigram": 2.301, "MHA": 1.690}


def test_nats_become_bits_by_dividing_by_ln_2():
    assert math.isclose(bits_per_character(math.log(2)), 1.0)
    assert round(bits_per_character(LOSSES["MHA"]), 2) == 2.44
    assert round(bits_per_character(LOSSES["uniform"]), 2) == 5.91  # log2(60)


def test_each_bar_is_its_loss_in_bits_top_to_bottom_in_order():
    fig = plot_bits_per_character(LOSSES, title="t")
    (ax,) = fig.axes
    bars = list(ax.patches)
    expected = [loss / math.log(2) for loss in LOSSES.values()]
    np.testing.assert_allclose([bar.get_width() for bar in bars], expected)
    np.testing.assert_allclose([bar.get_y() + bar.get_height() / 2 for bar in bars], range(4))
    assert ax.yaxis_inverted()  # the first entry on top
    assert [t.get_text() for t in ax.get_yticklabels()] == list(LOSSES)
    assert [t.get_text() for t in ax.texts] == ["5.91 bits", "4.46 bits", "3.32 bits", "2.44 bits"]
    grey = [matplotlib.colors.same_color(b.get_facecolor(), BASELINE_COLOUR) for b in bars]
    assert grey == [True, True, True, False]  # the model, last, in colour
    assert ax.get_title() == "t" and "bits per character" in ax.get_xlabel()
    plt.close(fig)


@pytest.mark.parametrize(
    "losses, message",
    [
        ({}, "losses_nats: expected a non-empty dict"),
        ([("MHA", 1.7)], "losses_nats: expected a non-empty dict"),
        ({"MHA": -1.0}, r"losses_nats\['MHA'\]: expected a positive, finite loss"),
        ({"MHA": float("nan")}, r"losses_nats\['MHA'\]: expected a positive, finite loss"),
        ({"MHA": "1.7"}, r"losses_nats\['MHA'\]: expected a positive, finite loss"),
        ({"MHA": True}, r"losses_nats\['MHA'\]: expected a positive, finite loss"),
    ],
)
def test_bad_losses_are_refused_with_the_argument_named(losses, message):
    with pytest.raises(ValueError, match=message):
        plot_bits_per_character(losses)
