"""step_read_ms and plot_step_read_time: a decoding step's bytes over the bandwidth, by hand."""

import math

import matplotlib
import numpy as np
import pytest
from matplotlib import pyplot as plt

from attnbook.book.read_time_plot import WEIGHT_COLOUR, plot_step_read_time, step_read_ms

matplotlib.use("Agg")

# the 7B shape of book/12_tiny_gpt.ipynb: 6.7e9 bfloat16 weights, 32 layers of 32 heads of 128
WEIGHT_BYTES = 2 * 6.7e9
PER_TOKEN = {"MHA": 2 * 32 * 32 * 128 * 2, "GQA (H_kv = 8)": 2 * 32 * 8 * 128 * 2}
CASES = [(64, 1), (4096, 1), (4096, 16), (32768, 1)]
BANDWIDTH = 3.35e12


def test_the_read_times_are_the_bytes_over_the_bandwidth():
    weights, cache = step_read_ms(WEIGHT_BYTES, PER_TOKEN["MHA"], 4096, 16, BANDWIDTH)
    assert math.isclose(weights, 1e3 * 13.4e9 / 3.35e12)  # 4.0 ms
    # 16 sequences of 4,096 tokens at 512 KiB each: 2.56 times the weights
    assert math.isclose(cache, 1e3 * 16 * 4096 * 524288 / 3.35e12)
    assert math.isclose(cache / weights, 16 * 4096 * 524288 / 13.4e9)
    assert round(weights + cache, 1) == 14.3  # the chapter's figures
    gqa = sum(step_read_ms(WEIGHT_BYTES, PER_TOKEN["GQA (H_kv = 8)"], 4096, 16, BANDWIDTH))
    assert round(gqa, 1) == 6.6


def test_each_bar_stacks_the_cache_on_the_weights_and_is_labelled_with_its_total():
    fig = plot_step_read_time(WEIGHT_BYTES, PER_TOKEN, CASES, BANDWIDTH, bandwidth_label="x")
    (ax,) = fig.axes
    bars = [patch for patch in ax.patches]
    assert len(bars) == 2 * len(PER_TOKEN) * len(CASES)  # a weight and a cache bar each
    grey = [b for b in bars if matplotlib.colors.same_color(b.get_facecolor(), WEIGHT_COLOUR)]
    coloured = [b for b in bars if b not in grey]
    assert len(grey) == len(coloured) == len(PER_TOKEN) * len(CASES)
    expected_weights = 1e3 * WEIGHT_BYTES / BANDWIDTH
    np.testing.assert_allclose([b.get_width() for b in grey], expected_weights)
    expected_cache = [
        step_read_ms(WEIGHT_BYTES, PER_TOKEN[name], t, b, BANDWIDTH)[1]
        for name in PER_TOKEN
        for t, b in CASES
    ]
    np.testing.assert_allclose([b.get_width() for b in coloured], expected_cache)
    np.testing.assert_allclose([b.get_x() for b in coloured], expected_weights)
    texts = [t.get_text() for t in ax.texts]
    assert "MHA: 14.3 ms" in texts and "GQA (H_kv = 8): 6.6 ms" in texts
    assert "MHA: 4.0 ms" in texts
    # the first case on top: its bars sit at the smallest y, and the y axis is inverted
    assert ax.yaxis_inverted()
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "T = 64\nbatch 1"
    assert ax.get_xlabel().endswith("at x")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["weights (every variant)", "MHA cache", "GQA (H_kv = 8) cache"]
    plt.close(fig)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: step_read_ms(0, 8, 1, 1, 1e12), "weight_bytes: expected a positive"),
        (lambda: step_read_ms(1e9, 8, 1, 1, -1.0), "bandwidth: expected a positive"),
        (lambda: step_read_ms(1e9, 8, 1, 1, math.inf), "bandwidth: expected a finite"),
        (lambda: step_read_ms(1e9, 8, 0, 1, 1e12), "context"),
        (lambda: step_read_ms(1e9, 8, 1, 1.5, 1e12), "batch"),
        (lambda: plot_step_read_time(1e9, {}, CASES, 1e12), "cache_bytes_per_token"),
        (lambda: plot_step_read_time(1e9, PER_TOKEN, [], 1e12), "cases: expected a non-empty"),
        (lambda: plot_step_read_time(1e9, PER_TOKEN, [(64,)], 1e12), "cases: expected"),
        (lambda: plot_step_read_time(1e9, {"MHA": 2.5}, CASES, 1e12), "cache_bytes_per_token"),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
    plt.close("all")
