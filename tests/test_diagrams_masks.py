"""Chapter 4's mask gallery: each panel is the mask its title names, and plot_attention's mask."""

import matplotlib
import numpy as np
import pytest
import torch
from helpers import figure_texts
from matplotlib import pyplot as plt

from attnbook import causal_mask, plot_attention, plot_heads
from attnbook.book.diagrams import mask_gallery
from attnbook.book.diagrams.masks import gallery_masks

matplotlib.use("Agg")


def allowed_pairs(mask):
    return {(t, s) for t, s in zip(*torch.nonzero(mask, as_tuple=True), strict=True)}


def test_each_mask_follows_its_rule():
    masks = gallery_masks(n_tokens=6, length=4, prompt=3)
    pairs = {title: {(int(t), int(s)) for t, s in allowed_pairs(m)} for title, m in masks.items()}
    every = [(t, s) for t in range(6) for s in range(6)]
    assert pairs["causal"] == {(t, s) for t, s in every if s <= t}
    assert pairs["padding only (right)"] == {(t, s) for t, s in every if s < 4}
    assert pairs["right padding & causal"] == {(t, s) for t, s in every if s <= t and s < 4}
    assert pairs["left padding & causal"] == {(t, s) for t, s in every if 2 <= s <= t}
    assert pairs["bottom-right causal, T=3, S=6"] == {
        (t, s) for t in range(3) for s in range(6) if s <= t + 3
    }
    assert pairs["prefix-LM, prompt of 3"] == {(t, s) for t, s in every if s <= t or s < 3}
    same_doc = {(t, s) for t, s in every if (t < 3) == (s < 3) and s <= t}
    assert pairs["packed documents (3 + 3)"] == same_doc
    assert all(m.dtype == torch.bool for m in masks.values())


def test_the_gallery_draws_every_mask_with_its_title():
    masks = gallery_masks()
    figure = mask_gallery()
    titles = [ax.get_title() for ax in figure.axes if ax.images]
    drawn = [ax.images[0].get_array() for ax in figure.axes if ax.images]
    legend = "\n".join(figure_texts(figure))
    assert titles == list(masks)
    assert "dark: may attend (True)" in legend and "light: blocked (False)" in legend
    assert len(drawn) == len(masks)
    for image, mask in zip(drawn, masks.values(), strict=True):
        assert np.array_equal(np.asarray(image), mask.numpy().astype(np.int8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_tokens": 1}, r"n_tokens: expected an int >= 2, got 1"),
        ({"length": 6}, r"length: expected an int in \[1, 5\], got 6"),
        ({"prompt": 0}, r"prompt: expected an int in \[1, 5\], got 0"),
    ],
)
def test_bad_sizes_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gallery_masks(**kwargs)


def test_plot_attention_greys_blocked_pairs_but_not_zero_weights():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 1 allowed, weight 0
    mask = torch.tensor([[True, False, False], [True, True, True]])
    ax = plot_attention(weights, mask=mask)
    image = ax.images[0].get_array()
    plt.close(ax.figure)
    assert np.array_equal(np.ma.getmaskarray(image), ~mask.numpy())
    assert np.ma.getdata(image)[1].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"mask: expected the weights' shape \(2, 3\)"):
        plot_attention(weights, mask=causal_mask(3))
    with pytest.raises(ValueError, match="mask: expected a boolean mask"):
        plot_attention(weights, mask=mask.int())


def test_plot_heads_greys_blocked_pairs_but_not_zero_weights():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]).expand(2, 2, 3)  # (H, T, S)
    mask = torch.tensor([[[True, False, False], [True, True, True]], [[True] * 3] * 2])
    figure = plot_heads(weights, mask=mask)
    images = [ax.images[0].get_array() for ax in figure.axes if ax.images]
    plt.close(figure)
    for image, head_mask in zip(images, mask, strict=True):
        assert np.array_equal(np.ma.getmaskarray(image), ~head_mask.numpy())
    assert np.ma.getdata(images[0])[1].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"mask: expected the weights' shape \(2, 2, 3\)"):
        plot_heads(weights, mask=mask[:1])
    with pytest.raises(ValueError, match="mask: expected a boolean mask"):
        plot_heads(weights, mask=mask.int())
