"""The cost of one decoding step against the cache length: dense MLA against sparse attention."""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attnbook.book.plotting import OKABE_ITO
from attnbook.core._checks import check_int
from attnbook.sparse.cost import PARTS, decode_cost, first_length

UNITS = {"flops": ("FLOPs", 1e9, "GFLOPs"), "bytes": ("bytes read", 1e6, "MB")}


def plot_decode_cost(lengths: Sequence[int]) -> Figure:
    """Two log-log panels (FLOPs, bytes read) per decoding query and layer against cache length.

    Lines: dense MLA, the sparse model's main attention, its indexer and the sparse total
    (dashed). A dotted vertical line marks the first length where the sparse step wins, a
    dash-dotted one where the indexer overtakes the main attention.
    """
    if isinstance(lengths, str) or len(lengths) < 2:
        raise ValueError(f"lengths: expected at least two cache lengths, got {lengths!r}")
    for length in lengths:
        check_int("lengths", length)
    x = np.asarray(lengths)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for ax, (unit, (name, divisor, label)) in zip(axes, UNITS.items(), strict=True):
        costs = [decode_cost(int(length))[unit] for length in lengths]
        for i, part in enumerate(PARTS):
            y = np.array([cost[part] for cost in costs]) / divisor
            ax.plot(x, y, color=OKABE_ITO[i], label=part)
        total = np.array([c["sparse attention"] + c["indexer"] for c in costs]) / divisor
        ax.plot(x, total, color="black", linestyle="--", label="sparse total")
        wins, leads = first_length(unit, "sparse wins"), first_length(unit, "indexer leads")
        ax.axvline(wins, color="grey", linestyle=":", label=f"sparse wins from {wins:,}")
        ax.axvline(leads, color="grey", linestyle="-.", label=f"indexer leads from {leads:,}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens in the cache (L)")
        ax.set_ylabel(f"{label} per query and layer")
        ax.set_title(f"decode: {name}")
        ax.legend(fontsize=8)
    return fig
