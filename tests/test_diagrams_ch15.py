"""Chapter 15's diagram: every option of GroupedQueryAttention drawn where it acts."""

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt

from attnbook import GroupedQueryAttention
from attnbook.book.diagrams import attention_options

matplotlib.use("Agg")

ARGUMENTS = ("qk_norm=True", "rope=True", "logit_softcap", "sinks=True", "output_gate")


def test_attention_options_names_every_option_by_its_argument():
    figure = attention_options()
    shown = "\n".join(figure_texts(figure))
    plt.close(figure)
    for argument in ARGUMENTS:
        assert argument in shown, argument
    assert "window=4096" in shown and "c = 50" in shown
    # the layer's window builds a tensor mask: the box must not call it FlexAttention's mask_mod
    assert "(bool tensor)" in shown and "mask_mod" not in shown
    # the names drawn are real arguments of the layer
    layer = GroupedQueryAttention(
        16, 4, 2, qk_norm=True, rope=True, logit_softcap=50.0, window=4, output_gate=True
    )
    assert layer.q_norm is not None and layer.gate_proj is not None and layer.window == 4
    # the two options the figure marks as exclusive are refused together
    assert "exclude each other" in shown
    with pytest.raises(ValueError):
        GroupedQueryAttention(16, 4, 2, logit_softcap=50.0, sinks=True)


def test_attention_options_draws_the_stages_in_the_layer_s_order():
    figure = attention_options()
    ax = figure.axes[0]
    x_of = {text.get_text().split("\n")[0]: text.get_position()[0] for text in ax.texts}
    plt.close(figure)
    order = ["QK-norm", "RoPE", "q · k / √d", "soft-cap", "mask", "softmax with"]
    assert [x_of[name] for name in order] == sorted(x_of[name] for name in order)
    assert x_of["mix V"] < x_of["⊙ σ(x W_g)"]  # the gate acts on the mixed values, before W_O


def test_attention_options_follows_its_arguments():
    figure = attention_options(window=128, cap=30.0)
    shown = "\n".join(figure_texts(figure))
    plt.close(figure)
    assert "window=128" in shown and "c = 30" in shown


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"window": 0}, r"window: expected a positive int, got 0"),
        ({"window": 2.5}, r"window: expected a positive int, got 2.5"),
        ({"window": True}, r"window: expected a positive int, got True"),
        ({"cap": 0}, r"cap: expected a number > 0, got 0"),
        ({"cap": "50"}, r"cap: expected a number > 0, got '50'"),
        ({"cap": float("nan")}, r"cap: expected a number > 0, got nan"),
    ],
)
def test_attention_options_refuses_bad_arguments_without_leaving_a_figure(arguments, message):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match=message):
        attention_options(**arguments)
    assert plt.get_fignums() == before
