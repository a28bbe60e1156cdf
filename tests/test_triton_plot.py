"""plot_triton_run: the shipped GPU run's times and speed fractions, as chapter 16 draws them."""

import matplotlib
import pytest
from matplotlib import pyplot as plt

from attnbook.bench.triton import TARGET_SPEED, read_shipped_run, speed_fraction
from attnbook.bench.triton_plot import plot_triton_run

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def rows():
    return read_shipped_run()[1]


def _row(rows, dtype, head_dim, length):
    return next(
        r for r in rows if (r["dtype"], r["head_dim"], r["length"]) == (dtype, head_dim, length)
    )


def test_the_left_panel_is_each_implementations_forward_time_on_log_axes(rows):
    fig = plot_triton_run(rows, 128)
    times, _ = fig.axes
    assert (times.get_xscale(), times.get_yscale()) == ("log", "log")
    lines = {line.get_label(): line for line in times.get_lines()}
    assert set(lines) == {"Triton", "SDPA", "tiled_attention"}
    row = _row(rows, "float16", 128, 1024)
    assert lines["Triton"].get_ydata()[0] == row["forward"]["triton"][0]
    # tiled attention ran only up to T = 4096: three points, the others five
    assert [len(lines[name].get_xdata()) for name in ("Triton", "tiled_attention")] == [5, 3]
    plt.close(fig)


def test_the_right_panel_is_the_fraction_per_width_and_mode_with_the_target(rows):
    fig = plot_triton_run(rows, 64, dtype="bfloat16")
    _, fractions = fig.axes
    lines = {line.get_label(): line for line in fractions.get_lines()}
    expected = [f"d = {d}, {m}" for d in (64, 128) for m in ("forward", "fwd + bwd")]
    assert all(label in lines for label in expected)
    row = _row(rows, "bfloat16", 64, 16384)
    assert lines["d = 64, fwd + bwd"].get_ydata()[-1] == speed_fraction(row, "backward")
    assert any(list(line.get_ydata()) == [TARGET_SPEED] * 2 for line in lines.values())
    plt.close(fig)


def test_a_width_or_dtype_not_in_the_rows_is_refused_by_name(rows):
    with pytest.raises(ValueError, match="head_dim: expected one of the rows' widths"):
        plot_triton_run(rows, 96)
    with pytest.raises(ValueError, match="dtype: expected one of the rows' dtypes"):
        plot_triton_run(rows, 64, dtype="float32")
