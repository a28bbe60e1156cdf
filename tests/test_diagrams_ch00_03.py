"""Chapter 0's, 1's and 3's diagrams: they render and carry the labels the chapters name."""

import matplotlib
from helpers import figure_texts
from matplotlib.colors import same_color
from matplotlib.patches import FancyArrowPatch

from attnbook.book.diagrams import attention_shapes, self_attention_dataflow, seq2seq_decoders
from attnbook.book.diagrams._draw import ORANGE

matplotlib.use("Agg")


def test_seq2seq_decoders_shows_one_c_against_a_fresh_c_t_per_step():
    labels = figure_texts(seq2seq_decoders(n_inputs=4, n_steps=3))
    # one summary c in each panel: every step's in the plain one, only s_0's in attention's
    assert labels.count("$c$") == 2
    assert [f"$c_{t}$" for t in (1, 2, 3)] == [x for x in labels if x.startswith("$c_")]
    assert labels.count("$h_1$") == 2 and labels.count("$h_4$") == 2 and "$h_5$" not in labels
    assert labels.count("$s_0$") == 2 and labels.count("$y_3$") == 2
    assert "query $s_{t-1}$" in labels and r"weights $\alpha_{tj}$" in labels


def test_seq2seq_decoders_feeds_c_t_to_the_state_and_the_output():
    n_steps = 3
    figure = seq2seq_decoders(n_inputs=4, n_steps=n_steps)
    arrows = [p for p in figure.axes[0].patches if isinstance(p, FancyArrowPatch)]
    context_arrows = sum(same_color(p.get_edgecolor(), ORANGE) for p in arrows)
    # plain: c to every s_t and every y_t; attention: c to s_0, then each c_t to s_t and y_t
    assert context_arrows == (n_steps + 1) + n_steps + 1 + 2 * n_steps


def test_seq2seq_decoders_follows_its_sizes():
    labels = figure_texts(seq2seq_decoders(n_inputs=6, n_steps=2))
    assert labels.count("$h_6$") == 2 and "$c_3$" not in labels and "$c_2$" in labels


def test_self_attention_dataflow_writes_every_shape():
    joined = "\n".join(figure_texts(self_attention_dataflow(T=5, D=12, d_head=4)))
    for shape in ["(T, D) = (5, 12)", "(T, d_head) = (5, 4)", "(S, d_head) = (5, 4)"]:
        assert shape in joined
    assert joined.count("(T, S) = (5, 5)") == 2
    for step in ["$W_q$", "$W_k$", "$W_v$", "scores", "softmax", "weighted sum"]:
        assert step in joined


def test_attention_shapes_names_the_trace_steps_with_their_shapes():
    joined = "\n".join(figure_texts(attention_shapes(T=3, S=5, d=4, d_v=2)))
    for shape in ["(T, d) = (3, 4)", "(S, d) = (5, 4)", "(S, d_v) = (5, 2)", "(T, d_v) = (3, 2)"]:
        assert shape in joined
    assert joined.count("(T, S) = (3, 5)") == 2
    for step in ["scores", "weights", "attended", "softmax"]:
        assert step in joined
