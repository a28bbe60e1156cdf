"""Chapter 18's diagrams: the growing KV cache beside the fixed-size state, one delta-rule
update, the chunked form, the Gated DeltaNet layer."""

import pytest
from helpers import figure_texts
from matplotlib import pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.book.diagrams import (
    cache_versus_state,
    chunked_delta_rule,
    delta_rule_update,
    gated_deltanet_layer,
)


def boxes_by_text(figure):
    """(text centred in the box, the box) for every box of the figure's first axes."""
    ax = figure.axes[0]
    return [
        (text.get_text(), patch)
        for patch in ax.patches
        if isinstance(patch, FancyBboxPatch)
        for text in ax.texts
        if patch.get_bbox().contains(*text.get_position())
    ]


def arrow_ends(figure):
    """(start, end) of every arrow of the figure's first axes."""
    return [p._posA_posB for p in figure.axes[0].patches if isinstance(p, FancyArrowPatch)]


def test_cache_versus_state_shows_both_memories_and_the_update():
    figure = cache_versus_state()
    shown = figure_texts(figure)
    plt.close(figure)
    assert "k_6" in shown and "v_6" in shown and "k_7" not in shown
    assert "S\n(4 x 4)\n\nz (4)" in shown
    assert any("S <- S + phi(k_t) v_t^T" in text for text in shown)
    assert any("z <- z + phi(k_t)" in text for text in shown)
    assert not any("alpha" in text or "beta" in text for text in shown)
    assert any("4 x 4 + 4 = 20 numbers per head" in text for text in shown)


def test_cache_versus_state_follows_its_sizes():
    figure = cache_versus_state(length=3, d_k=8, d_v=2)
    shown = figure_texts(figure)
    plt.close(figure)
    assert "k_3" in shown and "k_4" not in shown
    assert "S\n(8 x 2)\n\nz (8)" in shown and any("8 x 2 + 8 = 24" in text for text in shown)
    assert any("t = 3: 3 keys and 3 values" in text for text in shown)


def test_cache_versus_state_points_query_t_at_every_row_of_the_cache():
    for length in (3, 6):
        figure = cache_versus_state(length=length)
        boxes = [(text, patch.get_bbox().extents) for text, patch in boxes_by_text(figure)]
        arrows = arrow_ends(figure)
        plt.close(figure)
        query = min((extents for text, extents in boxes if text == "q_t"), key=lambda e: e[0])
        fan = [end for start, end in arrows if start[0] == query[0]]
        assert len(fan) == length
        for row in range(1, length + 1):  # one arrow ends just right of v_row, level with it
            _, y0, x1, y1 = next(extents for text, extents in boxes if text == f"v_{row}")
            hits = [end for end in fan if x1 <= end[0] <= x1 + 0.1 and y0 <= end[1] <= y1]
            assert len(hits) == 1, row


def test_delta_rule_update_shows_erase_fade_write_and_the_moved_read():
    shown = figure_texts(delta_rule_update())
    steps = [text for text in shown if text.startswith(("erase", "fade", "write"))]
    assert steps == [
        "erase along k_t\n(I - beta k_t k_t^T) S",
        "fade the whole memory\nalpha_t x",
        "write along k_t\n+ beta k_t v_t^T",
    ]
    assert "read after: S_t^T k_t = 0.5 held + 0.5 v_t" in shown
    assert any("(beta = 0.5, alpha = 1)" in text for text in shown)


def test_delta_rule_update_follows_beta_and_refuses_bad_beta():
    shown = figure_texts(delta_rule_update(beta=1.0))
    assert "read after: S_t^T k_t = 0 held + 1 v_t" in shown
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match=r"beta: expected a number in \[0, 1\], got"):
            delta_rule_update(beta=bad)


def test_chunked_delta_rule_draws_one_triangle_per_chunk_and_the_states():
    figure = chunked_delta_rule(length=10, chunk_size=4)
    patches = figure.axes[0].patches
    cells = [p for p in patches if isinstance(p, FancyBboxPatch) and p.get_width() == 0.5]
    shown = figure_texts(figure)
    # chunks of 4, 4 and 2 tokens: lower triangles of 10, 10 and 3 cells
    assert len(cells) == 10 + 10 + 3
    assert [text for text in shown if text.startswith("tokens")] == [
        "tokens 1-4",
        "tokens 5-8",
        "tokens 9-10",
    ]
    assert [text for text in shown if text.startswith("S_")] == ["S_0", "S_4", "S_8", "S_10"]
    assert any("3 sequential steps" in text for text in shown)
    assert any("O(T C d + T d^2)" in text and "O(T^2 d)" in text for text in shown)


def test_chunked_delta_rule_refuses_bad_sizes_by_name():
    with pytest.raises(ValueError, match=r"chunk_size: expected an int in \[1, 6\], got 7"):
        chunked_delta_rule(length=6, chunk_size=7)
    with pytest.raises(ValueError, match=r"length: expected an int in \[1, 24\], got 0"):
        chunked_delta_rule(length=0)


def test_gated_deltanet_layer_draws_the_six_steps_in_order():
    shown = figure_texts(gated_deltanet_layer())
    blocks = [text.split("\n")[0] for text in shown]
    path = ["x", "q, k, v", "causal conv", "L2 norm q, k", "gated delta rule, per head"]
    assert [b for b in blocks if b in path] == path
    assert blocks.index("RMS norm") < blocks.index("x SiLU(gate)") < blocks.index("output")
    assert "beta_t = sigmoid(W_b x)" in blocks and "alpha_t = exp(-e^A" in blocks
    # beta, alpha and the output gate are all computed from x, and each says so
    for first in ("beta_t = sigmoid(W_b x)", "alpha_t = exp(-e^A", "x SiLU(gate)"):
        assert "from x" in next(text for text in shown if text.startswith(first)), first
    assert any("S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1}" in text for text in shown)
    assert "Gated DeltaNet: D = 32, H = 4 heads of d_head = 8" in shown
    assert any("d_head x d_head = 64 numbers" in text for text in shown)
    assert any("per layer, the last 3 inputs of the convolution, 3 x 3D = 288" in t for t in shown)


def test_gated_deltanet_layer_draws_an_arrow_from_x_to_beta_and_to_alpha():
    figure = gated_deltanet_layer()
    # each box by the first line of the text centred in it
    boxes = {text.split("\n")[0]: patch for text, patch in boxes_by_text(figure)}
    arrows = arrow_ends(figure)
    plt.close(figure)

    def on(point, name):  # on or inside the box, its edge included
        x0, y0, x1, y1 = boxes[name].get_bbox().extents
        return x0 <= point[0] <= x1 and y0 <= point[1] <= y1

    for gate in ("beta_t = sigmoid(W_b x)", "alpha_t = exp(-e^A"):
        assert any(on(start, "x") and on(end, gate) for start, end in arrows), gate


def test_gated_deltanet_layer_follows_its_sizes_and_refuses_bad_ones():
    shown = figure_texts(gated_deltanet_layer(d_model=64, n_heads=2, conv_kernel=3))
    assert "Gated DeltaNet: D = 64, H = 2 heads of d_head = 32" in shown
    assert any("(3 tokens)" in text for text in shown)
    assert any("= 1024 numbers; per layer, the last 2 inputs" in text for text in shown)
    assert any("2 x 3D = 384 numbers" in text for text in shown)
    with pytest.raises(ValueError, match=r"n_heads: expected a divisor of d_model = 32, got 5"):
        gated_deltanet_layer(n_heads=5)
    with pytest.raises(ValueError, match=r"conv_kernel: expected a positive int, got 0"):
        gated_deltanet_layer(conv_kernel=0)
