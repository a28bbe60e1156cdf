"""The diagrams of chapters 7 and 11 carry the labels their captions promise."""

import matplotlib
from helpers import figure_texts
from matplotlib import pyplot as plt

from attnbook.book.diagrams import rope_rotation

matplotlib.use("Agg")


def test_rope_rotation_labels_both_panels_and_the_angle():
    figure = rope_rotation()
    shown = figure_texts(figure)
    plt.close(figure)
    for name in ("R2 q", "R1 k", "R5 q", "R4 k"):
        assert name in shown
    assert shown.count("φ + 1θ") == 2
    # the grey vectors before rotation, labelled in both panels, and the angle between them
    assert shown.count("q") == 2 and shown.count("k") == 2 and shown.count("φ") == 2
    assert "query at m = 2, key at n = 1" in shown and "query at m = 5, key at n = 4" in shown


def test_rope_rotation_follows_its_shift():
    figure = rope_rotation(shift=10)
    shown = figure_texts(figure)
    plt.close(figure)
    assert "R12 q" in shown and "R11 k" in shown


def test_mla_data_flow_shows_the_cache_and_the_projections():
    from attnbook.book.diagrams import mla_data_flow

    figure = mla_data_flow()
    shown = figure_texts(figure)
    plt.close(figure)
    for name in ("W_DKV", "W_UK", "W_UV", "W_Q", "W_QR, R_t", "W_KR, R_t", "c_KV\n(512)"):
        assert name in shown
    assert shown.count("cached") == 2
    assert any("512 + 64 = 576" in text for text in shown)


def test_mla_data_flow_follows_its_widths():
    from attnbook.book.diagrams import mla_data_flow

    figure = mla_data_flow(latent_dim=16, rope_dim=4, head_dim=8)
    shown = figure_texts(figure)
    plt.close(figure)
    assert "c_KV\n(16)" in shown and any("16 + 4 = 20" in text for text in shown)


def test_mla_absorbed_flow_shows_one_shared_key_head():
    from attnbook.book.diagrams import mla_absorbed_flow

    figure = mla_absorbed_flow(latent_dim=16, rope_dim=4, head_dim=8, n_heads=3)
    shown = figure_texts(figure)
    plt.close(figure)
    assert "W_UK^T" in shown and "W_UV, W_O" in shown
    assert "q in latent space\n(H, 16)" in shown and "q_C per head\n(H, 8)" in shown
    assert any("3 query heads,\n1 key head\nof width 20" in text for text in shown)
    assert any("20 numbers" in text for text in shown)


def test_tiny_gpt_variants_lists_what_each_variant_caches():
    from attnbook.book.diagrams import tiny_gpt_variants

    figure = tiny_gpt_variants(n_layers=3, n_heads=8, n_kv_heads=2, latent_dim=24, head_dim=12)
    shown = figure_texts(figure)
    plt.close(figure)
    assert "block\nx 3" in shown
    # MQA's cache written out, so that it can be set beside MLA's latent
    for cached in ("2 x 8 x d_head", "2 x 2 x d_head", "2 x d_head = 24", "d_c = 24"):
        assert cached in shown
    assert "W_K, W_V: 8 key/value heads" in shown and "LayerNorm, attention" in shown
    assert "LayerNorm, MLP\n(width set per variant)" in shown  # the width differs too
    assert not any("only part" in text for text in shown)
