"""The introduction's preview: one trained head reading real text, and what the chapters build.

Left, the attention weights of one head of the book's reference model (chapter 13), a
character-level model trained on Genesis, reading a phrase of it: queries as rows, keys as
columns, the characters as labels (a space drawn as "␣"), and a colorbar. Right, the parts of
the book as a strip of boxes, read downwards, each with its chapters and what they build.
"""

import torch
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, LIGHT, ORANGE, SKY, arrow, box, label
from attnbook.book.plotting import plot_attention
from attnbook.core._checks import check_int
from attnbook.models.reference_model import load_reference_model

# the opening words of Genesis 6:13 and 9:17, lines 151 and 223 of data/genesis_kjv.txt, in
# the first 90 % the model was trained on
PREVIEW_TEXT = "And God said unto Noah,"

# (chapters, what they build): the book's parts, in the order they are read
CHAPTER_STRIP = (
    ("0-6", "attention from plain tensors:\nscores, masks, heads, shared K/V heads"),
    ("7-11", "positions, the KV cache,\ntiled, ring and latent attention"),
    ("12-14", "a tiny GPT, trained,\nand its heads taken apart (left)"),
    ("15", "attention in today's open models"),
    ("16-19", "a Triton kernel, a paged serving cache,\nlinear and sparse attention"),
)
_COLOURS = (LIGHT, SKY, LIGHT, ORANGE, BLUE)
_BOX_W, _BOX_H, _STEP = 5.6, 1.05, 1.45  # a strip box's size; distance between two boxes


def preview_weights(*, text: str = PREVIEW_TEXT, layer: int = 0, head: int = 7) -> torch.Tensor:
    """The reference model's causal weights (T, T) of ``head`` in ``layer`` on ``text`` (CPU)."""
    if not isinstance(text, str) or len(text) < 2:
        raise ValueError(f"text: expected a string of two characters or more, got {text!r}")
    reference = load_reference_model("cpu")
    config = reference.manifest["config"]
    check_int("layer", layer, low=0, high=config["n_layers"] - 1)
    check_int("head", head, low=0, high=config["n_heads"] - 1)
    if len(text) > config["max_len"]:
        raise ValueError(
            f"text: {len(text)} characters, expected at most the model's {config['max_len']}"
        )
    tokens = reference.vocabulary.encode(text)[None]  # (1, T)
    with torch.no_grad():
        weights = reference.model.attention_weights(tokens)  # (L, 1, H, T, T)
    return weights[layer, 0, head]  # (T, T)


def book_preview(*, text: str = PREVIEW_TEXT, layer: int = 0, head: int = 7) -> Figure:
    """Draw one trained head's weights on ``text`` next to the strip of what the chapters build."""
    weights = preview_weights(text=text, layer=layer, head=head)  # (T, T)
    characters = ["␣" if c == " " else c for c in text]
    figure, (heat, strip) = plt.subplots(
        1, 2, figsize=(12.0, 5.6), layout="constrained", gridspec_kw={"width_ratios": [1.15, 1]}
    )
    title = f"a trained head (layer {layer}, head {head}) reading Genesis"
    plot_attention(weights, characters, characters, ax=heat, title=title)
    height = len(CHAPTER_STRIP) * _STEP + 0.6
    strip.set_xlim(0, _BOX_W + 1.9)
    strip.set_ylim(0, height)
    strip.set_aspect("equal")
    strip.axis("off")
    label(strip, ((_BOX_W + 1.9) / 2, height - 0.3), "what the chapters build", fontsize=12)
    for row, ((chapters, built), colour) in enumerate(zip(CHAPTER_STRIP, _COLOURS, strict=True)):
        y = height - 0.75 - (row + 1) * _STEP + (_STEP - _BOX_H)
        label(strip, (0.75, y + _BOX_H / 2), f"ch. {chapters}", fontsize=11)
        text_colour = "white" if colour == BLUE else "black"
        box(strip, 1.7, y, _BOX_W, _BOX_H, built, color=colour, text_color=text_colour)
        if row:
            arrow(
                strip,
                (1.7 + _BOX_W / 2, y + _BOX_H + _STEP - _BOX_H - 0.02),
                (1.7 + _BOX_W / 2, y + _BOX_H + 0.02),
            )
    return figure
