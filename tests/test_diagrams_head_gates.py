"""Chapter 13's head-gate diagram: one gate per head before W_O, the removed head in grey."""

import matplotlib
import pytest
from helpers import figure_texts, raises
from matplotlib.colors import to_hex
from matplotlib.patches import FancyBboxPatch

from attnbook.book.diagrams import head_gates
from attnbook.book.diagrams.head_gates import REMOVED
from attnbook.book.diagrams.heads import HEAD_COLORS

matplotlib.use("Agg")


@pytest.mark.parametrize(("n_heads", "removed"), [(3, 1), (1, 0), (4, None), (7, 6)])
def test_every_head_has_its_gate_then_its_slice_of_w_o(n_heads, removed):
    figure = head_gates(n_heads=n_heads, removed=removed)
    boxes = [p for p in figure.axes[0].patches if isinstance(p, FancyBboxPatch)]
    texts = figure_texts(figure)
    assert len(boxes) == 3 * n_heads + 2  # head, gate, W_O^h per head; the sum; the output
    for h in range(n_heads):
        gate = rf"$\times\, \xi_{h} = 0$" + "\n(removed)" if h == removed else None
        assert (gate or rf"$\times\, \xi_{h} = 1$") in texts
        assert rf"$\cdot\, W_O^{h}$" + "\n(d_head, D)" in texts
        expected = REMOVED if h == removed else HEAD_COLORS[h]
        assert to_hex(boxes[3 * h].get_facecolor()) == to_hex(expected)
    zero_gates = [text for text in texts if "= 0$" in text]
    assert len(zero_gates) == (removed is not None)
    assert "sum\nover h\n$+\\, b_O$" in texts and "MHA(x)\n(B, T, D)" in texts


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_heads": 0}, "n_heads: expected an int in [1, 7], got 0"),
        ({"n_heads": 8}, "n_heads: expected an int in [1, 7], got 8"),
        ({"n_heads": 3, "removed": 3}, "removed: expected an int in [0, 2], got 3"),
        ({"removed": -1}, "removed: expected an int in [0, 2], got -1"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with raises(message):
        head_gates(**kwargs)
