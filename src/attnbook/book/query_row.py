"""One query's row of attention, step by step: its scores, its weights, and how the weights
average the values into the output. The heatmap shows every row at once; this picture follows
one row through the three steps, with the numbers written on the bars."""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from attnbook.book.plotting import OKABE_ITO

_STEPS = ("score $q \\cdot k_j / \\sqrt{{{width}}}$", "weight $w_j$", "$w_j v_j$")


def _as_row(values, name: str) -> np.ndarray:
    if torch.is_tensor(values):
        values = values.detach().double().cpu().numpy()
    row = np.asarray(values, dtype=float)
    if row.ndim != 1 or row.size == 0 or not np.isfinite(row).all():
        raise ValueError(
            f"{name}: expected a non-empty 1-D row of finite numbers (S,), got shape "
            f"{row.shape} with values {row.tolist()!r}"
        )
    return row


def plot_query_row(
    scores,
    weights,
    values,
    key_labels: Sequence[str],
    *,
    query_label: str,
    width_label: str = "d",
    output_label: str = "output",
) -> Figure:
    """Three bar panels over the keys, one above the other: the query's scaled ``scores``
    (S,), its softmax ``weights`` (S,) and the products ``weights * values`` (S,), whose sum,
    the output, is in the bottom panel's title. Each key's label carries its value.

    ``width_label`` names the width in the score's $\\sqrt{\\cdot}$ (LaTeX, e.g.
    ``"d_\\text{head}"``); ``output_label`` names the sum, e.g. "output's first feature" when
    ``values`` holds one feature of each value vector."""
    scores, weights = _as_row(scores, "scores"), _as_row(weights, "weights")
    values = _as_row(values, "values")
    if not (len(scores) == len(weights) == len(values) == len(key_labels)):
        raise ValueError(
            f"key_labels: scores, weights, values and key_labels need one entry per key, got "
            f"lengths {len(scores)}, {len(weights)}, {len(values)} and {len(key_labels)}"
        )
    figure, axes = plt.subplots(3, 1, figsize=(7, 5.5), sharex=True, layout="constrained")
    keys = np.arange(len(scores))
    rows = (scores, weights, weights * values)
    names = (_STEPS[0].format(width=width_label), *_STEPS[1:])
    for ax, row, name, colour in zip(axes, rows, names, OKABE_ITO[:3], strict=True):
        bars = ax.bar(keys, row, color=colour)
        ax.bar_label(bars, fmt="%.3g", padding=2, fontsize=9)
        ax.set_ylabel(name)
        ax.margins(y=0.25)
    axes[0].set_title(f"the query of {query_label!r}: scores, then softmax, then weighted values")
    total = float((weights * values).sum())
    axes[2].set_title(f"{output_label} = sum of the bars = {total:.3g}")
    labels = [
        f"{label}\n$v$ = {value:.3g}" for label, value in zip(key_labels, values, strict=True)
    ]
    axes[2].set_xticks(keys, labels)
    return figure
