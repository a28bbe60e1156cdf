"""Chapter 19's diagram: the keys one query reads under each method."""

import matplotlib
import numpy as np
import pytest
from helpers import figure_texts
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.book.diagrams import indexer_flow, key_selection
from attnbook.sparse.nsa import compressed_mask

matplotlib.use("Agg")


def test_key_selection_labels_every_method_position_and_summary():
    texts = figure_texts(key_selection())
    for name in ("MoBA", "indexer", "NSA selected", "NSA sliding", "NSA compressed", "query t"):
        assert name in texts
    assert [str(p) for p in range(16)] == [t for t in texts if t.isdigit()]
    assert [t for t in texts if t.startswith("summary")] == [
        "summary 0",
        "summary 1",
        "summary 2",
        "summary 3",
    ]


def test_key_selection_colours_what_each_method_reads():
    figure = key_selection(n_tokens=8, block_size=2)
    ax = figure.axes[0]
    colours = [patch.get_facecolor() for patch in ax.patches]
    assert len(colours) == 4 * 8 + 4  # four rows of tokens, four summaries
    light = colours[0]  # MoBA skips token 0: the colour of a key not read
    sliding = colours[3 * 8 : 4 * 8]
    assert [c != light for c in sliding] == [False] * 6 + [True] * 2
    summaries = colours[4 * 8 :]  # the query ends its block: every summary is read
    assert all(c != light for c in summaries)
    figure_texts(figure)


@pytest.mark.parametrize("block_size", [1, 3, 9])
def test_key_selection_refuses_block_sizes_that_do_not_cut_the_row(block_size):
    with pytest.raises(ValueError, match="block_size: expected a divisor of n_tokens = 16"):
        key_selection(block_size=block_size)


def test_key_selection_draws_the_summaries_compressed_mask_allows():
    drawn = [t for t in figure_texts(key_selection()) if t.startswith("summary")]
    assert len(drawn) == compressed_mask(16, 4)[15].sum().item()


@pytest.mark.parametrize("n_heads", [1, 2, 3])
def test_indexer_flow_draws_a_query_a_score_and_a_weight_per_head_and_one_shared_key(n_heads):
    texts = figure_texts(indexer_flow(n_heads=n_heads))
    assert [t for t in texts if t.startswith("$q^I")] == [
        f"$q^I_{{t,{j}}}$" for j in range(1, n_heads + 1)
    ]
    assert texts.count("ReLU$(q \\cdot k / \\sqrt{d^I})$") == n_heads
    assert [t for t in texts if t.startswith("$\\times")] == [
        f"$\\times\\, w_{{t,{j}}}$" for j in range(1, n_heads + 1)
    ]
    assert [t for t in texts if t.startswith("$k^I")] == ["$k^I_s$, shared"]
    for step in ("$\\sum_j$: $I_{t,s}$", "top $k$\nover $s$"):
        assert step in texts


@pytest.mark.parametrize("n_heads", [0, 5, 2.0, True])
def test_indexer_flow_refuses_head_counts_it_cannot_draw(n_heads):
    with pytest.raises(ValueError, match="n_heads"):
        indexer_flow(n_heads=n_heads)


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4])
def test_indexer_flow_draws_no_arrow_behind_a_box(n_heads):
    ax = indexer_flow(n_heads=n_heads).axes[0]
    # each box's inside, in data units, less a margin for arrows that end on its edge
    insides = [p.get_bbox().padded(-0.05) for p in ax.patches if isinstance(p, FancyBboxPatch)]
    for patch in ax.patches:
        if not isinstance(patch, FancyArrowPatch):
            continue
        # get_path() is the arrow's line and head in data units
        for line in patch.get_path().to_polygons(closed_only=False):
            for start, end in zip(line[:-1], line[1:], strict=True):
                for share in np.linspace(0, 1, 41):
                    point = start + share * (end - start)
                    assert not any(b.contains(*point) for b in insides), (n_heads, point)
