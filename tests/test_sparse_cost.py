"""attnbook.sparse.cost and plot_decode_cost: the decode step's FLOPs and bytes, by hand."""

import matplotlib
import numpy as np
import pytest
from matplotlib import pyplot as plt

from attnbook.book.cost_plot import plot_decode_cost
from attnbook.sparse.cost import PARTS, decode_cost, first_length

matplotlib.use("Agg")


def test_decode_cost_at_128k_is_deepseeks_configuration_counted_by_hand():
    length = 128 * 1024
    cost = decode_cost(length)
    per_key = 128 * (576 + 512) * 2  # 128 heads, MQA mode: latent key 576, value 512
    assert cost["flops"] == {
        "dense": length * per_key,
        "sparse attention": 2048 * per_key,
        "indexer": length * 64 * 128 * 2,
    }
    assert cost["bytes"] == {
        "dense": length * 1152,  # BF16 latent of 576
        "sparse attention": 2048 * 1152,
        "indexer": length * (128 + 4),  # FP8 key and one FP32 scale
    }


def test_a_short_cache_reads_every_token_in_the_sparse_attention():
    cost = decode_cost(100)
    assert cost["flops"]["sparse attention"] == cost["flops"]["dense"]
    assert decode_cost(100, top_k=10)["bytes"]["sparse attention"] == 10 * 1152


@pytest.mark.parametrize("unit", ["flops", "bytes"])
@pytest.mark.parametrize("condition", ["sparse wins", "indexer leads"])
def test_first_length_is_the_first_length_where_the_condition_holds(unit, condition):
    def holds(length):
        cost = decode_cost(length)[unit]
        if condition == "sparse wins":
            return cost["sparse attention"] + cost["indexer"] < cost["dense"]
        return cost["indexer"] > cost["sparse attention"]

    first = first_length(unit, condition)
    assert holds(first) and not holds(first - 1) and holds(4 * first)


def test_the_crossings_by_hand():
    # sparse wins once L * (per_key - index) > 2048 * per_key; the indexer leads once it
    # costs more on L tokens than the attention on 2048
    per_key, index = 128 * 1088 * 2, 64 * 128 * 2
    assert first_length("flops", "sparse wins") == 2048 * per_key // (per_key - index) + 1
    assert first_length("flops", "indexer leads") == 2048 * per_key // index + 1
    assert first_length("bytes", "indexer leads") == 2048 * 1152 // 132 + 1


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: decode_cost(0), "length"),
        (lambda: decode_cost(10, top_k=0), "top_k"),
        (lambda: first_length("seconds", "sparse wins"), "unit: expected"),
        (lambda: first_length("flops", "faster"), "condition: expected"),
        (lambda: first_length("flops", "indexer leads", longest=100), "never holds"),
        (lambda: plot_decode_cost([4096]), "lengths: expected at least two"),
        (lambda: plot_decode_cost([4096, 0]), "lengths"),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_figure_draws_each_part_at_its_cost_and_marks_the_crossings():
    lengths = [2**n for n in range(10, 18)]
    fig = plot_decode_cost(lengths)
    for ax, (unit, divisor) in zip(fig.axes, (("flops", 1e9), ("bytes", 1e6)), strict=True):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for part in PARTS:
            expected = [decode_cost(n)[unit][part] / divisor for n in lengths]
            np.testing.assert_allclose(lines[part].get_ydata(), expected)
        total = [
            decode_cost(n)[unit]["sparse attention"] + decode_cost(n)[unit]["indexer"]
            for n in lengths
        ]
        np.testing.assert_allclose(lines["sparse total"].get_ydata(), np.array(total) / divisor)
        for condition in ("sparse wins", "indexer leads"):
            first = first_length(unit, condition)
            line = lines[f"{condition} from {first:,}"]
            assert list(line.get_xdata()) == [first, first]
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(fig)
