"""Chapter 4's mask gallery: the masks of the chapter side by side, drawn with ``plot_mask``.

Each panel is one (T, S) boolean mask, True = may attend, queries as rows and keys as columns:
causal, padding (right and left, each combined with causal, as a decoder uses them), padding
alone, bottom-right causal with fewer queries than keys, a prefix-LM mask and the block-diagonal
mask of documents packed into one sequence. :func:`gallery_masks` returns the tensors, so a test
(or a reader) can check each picture against the rule it claims.
"""

import torch
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from attnbook.book.plotting import plot_mask
from attnbook.core._checks import check_int
from attnbook.core.masks import causal_mask, padding_mask


def gallery_masks(
    *, n_tokens: int = 6, length: int = 4, prompt: int = 3
) -> dict[str, torch.Tensor]:
    """The gallery's masks by title: (T, S) booleans, True = may attend.

    ``length`` is the real length of the padded sentence, ``prompt`` the prefix-LM prompt length;
    the packed sequence holds documents of lengths ``prompt`` and ``n_tokens - prompt``.
    """
    check_int("n_tokens", n_tokens, low=2)
    check_int("length", length, high=n_tokens - 1)
    check_int("prompt", prompt, high=n_tokens - 1)
    T = n_tokens
    causal = causal_mask(T)  # (T, T)
    right = padding_mask([length], T)[0]  # (S,): True on the real tokens
    left = padding_mask([length], T, side="left")[0]  # (S,)
    is_prompt = torch.arange(T) < prompt  # (S,)
    document = (~is_prompt).long()  # (T,): document 0 then document 1
    same_document = document[:, None] == document[None, :]  # (T, T)
    return {
        "causal": causal,
        "padding only (right)": right.expand(T, T),
        "right padding & causal": right & causal,
        "left padding & causal": left & causal,
        f"bottom-right causal, T={T // 2}, S={T}": causal_mask(T // 2, T, align="bottom-right"),
        f"prefix-LM, prompt of {prompt}": causal | is_prompt,
        f"packed documents ({prompt} + {T - prompt})": causal & same_document,
    }


def mask_gallery(*, n_tokens: int = 6, length: int = 4, prompt: int = 3) -> Figure:
    """Draw :func:`gallery_masks` in a grid of small panels, blocked pairs light, allowed dark."""
    masks = gallery_masks(n_tokens=n_tokens, length=length, prompt=prompt)
    fig, axes = plt.subplots(
        2, 4, figsize=(12.5, 6.4), layout="constrained", gridspec_kw={"hspace": 0.08}
    )
    for ax, (title, mask) in zip(axes.flat, masks.items(), strict=False):
        plot_mask(mask, ax=ax, title=title)
        ax.images[-1].colorbar.remove()
    key_ax = axes.flat[-1]
    key_ax.axis("off")
    key_ax.text(
        0.0,
        0.5,
        "rows: queries, columns: keys\n"
        "dark: may attend (True)\n"
        "light: blocked (False)\n\n"
        f"padded sentence: {length} real\ntokens of {n_tokens}",
        va="center",
        fontsize=11,
    )
    return fig
