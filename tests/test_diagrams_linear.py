"""Chapter 18's diagram: the growing KV cache beside the fixed-size state."""

from helpers import figure_texts
from matplotlib import pyplot as plt

from attnbook.book.diagrams import cache_versus_state


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
