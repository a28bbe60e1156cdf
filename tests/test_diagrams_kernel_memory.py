"""Chapter 16's memory picture: HBM, L2 and one multiprocessor, with one program's traffic."""

import matplotlib
import pytest
from helpers import figure_texts
from matplotlib.patches import FancyArrowPatch

from attnbook.book.diagrams import kernel_memory

matplotlib.use("Agg")


def test_three_levels_hold_the_whole_tensors_the_cache_and_one_program():
    figure = kernel_memory()
    shown = figure_texts(figure)
    arrows = [p for p in figure.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert "HBM: GPU main memory, off chip" in shown
    assert any(
        text.startswith("L2 cache, on chip, shared by every multiprocessor") for text in shown
    )
    assert any(text.startswith("on chip: the multi-\nprocessor running") for text in shown)
    for whole in ("Q (B, H, T, d)", "K, V (B, H, S, d)", "O (B, H, T, d)", "lse (B, H, T)"):
        assert whole in shown
    # the library's GPU tiles: 128 queries by 64 keys
    assert "$Q_i$\n(128 x d)" in shown and "$K_j$, $V_j$\n(64 x d each)" in shown
    assert any(text.startswith("scores Z, weights $\\tilde A$ (128 x 64)") for text in shown)
    # four arrows: two reads, two writes; none carries the scores
    traffic = ["read once", "read at every step j", "$O_i$ written once", "lse$_i$ written once"]
    assert [text for text in shown if "once" in text or "step" in text] == traffic
    assert len(arrows) == 4


def test_tile_sizes_follow_the_arguments():
    figure = kernel_memory(block_m=64, block_n=32)
    shown = figure_texts(figure)
    assert "$Q_i$\n(64 x d)" in shown and "m, $\\ell$\n(64 each)" in shown
    assert any("(64 x 32)" in text for text in shown)


def test_bad_tile_sizes_are_named():
    with pytest.raises(ValueError, match=r"block_m: expected an int in \[16, 256\], got 8"):
        kernel_memory(block_m=8)
    with pytest.raises(ValueError, match=r"block_n: expected an int in \[16, 256\], got 512"):
        kernel_memory(block_n=512)
