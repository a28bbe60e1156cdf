"""Chapter 6's decoding figures: the cost count, the roofline's dots and the timing bars."""

import matplotlib
import numpy as np
import pytest
from matplotlib import pyplot as plt
from matplotlib.container import BarContainer

from attnbook.book.decode_plots import (
    decode_attention_cost,
    plot_bytes_per_step,
    plot_decode_roofline,
    plot_step_vs_read,
)

matplotlib.use("Agg")


@pytest.mark.parametrize("n_kv_heads", [32, 8, 4, 1])
def test_cost_counts_each_cached_number_once_for_every_query_head_of_its_group(n_kv_heads):
    flops, n_bytes = decode_attention_cost(32, n_kv_heads, 4096, 128, 2)
    # by hand: 32 heads x (4096 keys + 4096 values) x 128 multiply-adds, 2 FLOPs each
    assert flops == 32 * 2 * 4096 * 128 * 2
    assert n_bytes == 2 * n_kv_heads * 4096 * 128 * 2
    # in 16-bit floats the intensity is G = H / H_kv FLOP per byte
    assert flops / n_bytes == 32 // n_kv_heads
    # in 32-bit floats it halves
    flops32, bytes32 = decode_attention_cost(32, n_kv_heads, 4096, 128, 4)
    assert flops32 / bytes32 == (32 // n_kv_heads) / 2


@pytest.mark.parametrize(
    "args, message",
    [
        ((32, 3, 16, 8, 2), "n_kv_heads: expected a divisor of n_heads=32, got 3"),
        ((32, 0, 16, 8, 2), "n_kv_heads: expected a positive int, got 0"),
        ((32, 8, 16.0, 8, 2), "cache_length: expected a positive int, got 16.0"),
        ((32, 8, 16, 8, 0), "bytes_per_element: expected a positive int, got 0"),
    ],
)
def test_cost_refuses_bad_input_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        decode_attention_cost(*args)


def test_roofline_dots_sit_on_the_roof_and_the_ridge_is_peak_over_bandwidth():
    peak, bandwidth = 989e12, 3.35e12
    fig = plot_decode_roofline({"MHA": 1.0, "GQA": 4.0, "far right": 1e4}, peak, bandwidth, "X")
    ax = fig.axes[0]
    roof, ridge, *dots = ax.lines
    assert ridge.get_xdata()[0] == pytest.approx(peak / bandwidth)
    assert [d.get_ydata()[0] for d in dots] == pytest.approx([3.35, 13.4, 989.0])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[1] == "ridge point of X: 295 FLOP/B"
    assert labels[2] == "MHA: 1 FLOP/B, 0.3% of peak"
    assert labels[4] == "far right: 10000 FLOP/B, 100.0% of peak"
    # the roof: slope 1 (bandwidth-bound) left of the ridge, flat at the peak right of it
    x, y = roof.get_xdata(), roof.get_ydata()
    left, right = x < peak / bandwidth, x > peak / bandwidth
    assert np.allclose(y[left], bandwidth * x[left] / 1e12)
    assert np.allclose(y[right], peak / 1e12)
    plt.close(fig)


@pytest.mark.parametrize(
    "intensities, peak, message",
    [
        ({}, 1.0, "intensities: expected a non-empty dict"),
        ({"a": 0.0}, 1.0, r"intensities\['a'\]: expected a finite number > 0"),
        ({"a": 1.0}, -1.0, "peak_flops: expected a finite number > 0"),
    ],
)
def test_roofline_refuses_bad_input_by_name(intensities, peak, message):
    with pytest.raises(ValueError, match=message):
        plot_decode_roofline(intensities, peak, 1.0, "X")


def test_timing_bars_stand_at_the_fastest_try_with_whiskers_up_to_the_median():
    steps = {16: [0.020, 0.010, 0.040], 1: [0.004, 0.005, 0.003, 0.009]}
    reads = {16: [0.006, 0.005, 0.007], 1: [0.001, 0.002, 0.001, 0.001]}
    fig = plot_step_vs_read(steps, reads)
    ax = fig.axes[0]
    step_bars, read_bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_height() for p in step_bars] == pytest.approx([10.0, 3.0])
    assert [p.get_height() for p in read_bars] == pytest.approx([5.0, 1.0])
    # each whisker is a vertical segment from the fastest try to the median, in ms
    segments = step_bars.errorbar.lines[2][0].get_segments()
    ends = [end for s in segments for end in (s[0][1], s[1][1])]
    assert ends == pytest.approx([10, 20, 3, 4.5])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "decoding step (fastest try; whisker: up to the median)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["H_kv = 16", "H_kv = 1"]
    plt.close(fig)


@pytest.mark.parametrize(
    "steps, reads, message",
    [
        ({}, {}, "step_tries: expected a non-empty dict"),
        ({1: []}, {1: [1.0]}, r"step_tries\[1\]: expected a non-empty sequence"),
        ({1: [1.0]}, {1: [-1.0]}, r"read_tries\[1\]: expected a non-empty sequence"),
        ({1: [1.0]}, {2: [1.0]}, r"read_tries: expected the keys of step_tries \[1\]"),
    ],
)
def test_timing_bars_refuse_bad_input_by_name(steps, reads, message):
    with pytest.raises(ValueError, match=message):
        plot_step_vs_read(steps, reads)


def test_a_string_key_is_its_own_label_next_to_the_h_kv_counts():
    tries = {16: [0.02], 1: [0.004], "control": [0.001]}
    fig = plot_step_vs_read(tries, tries)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    plt.close(fig)
    assert labels == ["H_kv = 16", "H_kv = 1", "control"]


def test_bytes_per_step_are_the_weights_once_plus_every_sequences_cache():
    weights, caches = 1000, {4: 100, 1: 25}
    fig = plot_bytes_per_step(weights, caches, 64, 1e12)
    ax = fig.axes[0]
    weights_line, line_4, dot_4, line_1, dot_1 = ax.lines
    assert weights_line.get_ydata()[0] == pytest.approx(1e-6)
    # batch b reads 1000 + b * cache bytes, plotted in GB
    assert list(line_4.get_xdata()) == list(range(1, 65))
    assert line_4.get_ydata()[[0, 9, 63]] == pytest.approx([1100e-9, 2000e-9, 7400e-9])
    assert line_1.get_ydata()[[0, 63]] == pytest.approx([1025e-9, 2600e-9])
    # the dots: where the caches weigh as much as the weights, twice the weights in all
    assert (dot_4.get_xdata()[0], dot_4.get_ydata()[0]) == pytest.approx((10, 2000e-9))
    assert (dot_1.get_xdata()[0], dot_1.get_ydata()[0]) == pytest.approx((40, 2000e-9))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[1] == "H_kv = 4: caches outweigh the weights from batch 11"
    assert labels[2] == "H_kv = 1: caches outweigh the weights from batch 41"
    plt.close(fig)


def test_a_crossover_beyond_the_last_batch_gets_no_dot_but_its_batch_in_the_legend():
    fig = plot_bytes_per_step(1000, {1: 7}, 64, 1e12)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(ax.lines) == 2  # the weights and the one line, no dot
    assert labels[1] == "H_kv = 1: caches outweigh the weights from batch 143"
    plt.close(fig)


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, {1: 1}, 8, 1.0), "weight_bytes: expected a positive int, got 0"),
        ((10, {}, 8, 1.0), "cache_bytes: expected a non-empty dict"),
        ((10, {1: 2.5}, 8, 1.0), r"cache_bytes\[1\]: expected a positive int, got 2.5"),
        ((10, {1: 1}, 1, 1.0), "max_batch: expected an int >= 2, got 1"),
        ((10, {1: 1}, 8, 0.0), "bandwidth: expected a finite number > 0"),
    ],
)
def test_bytes_per_step_refuse_bad_input_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        plot_bytes_per_step(*args)
