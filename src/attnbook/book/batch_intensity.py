"""Chapter 8's batching figure: a decoding step's arithmetic intensity against the batch size.

A decoding step over a batch of ``b`` sequences reads the weights once and every sequence's
cache once, and does ``b`` times one sequence's arithmetic:

    intensity(b) = b * flops / (weight_bytes + b * cache_bytes)

While the weights dominate the bytes, the intensity grows in proportion to ``b``; once the
caches do, it levels off at ``flops / cache_bytes``, the ceiling no batch size can pass. Only
a smaller cache per sequence (fewer key/value heads, a shorter context) raises that ceiling.
"""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attnbook.book.plotting import OKABE_ITO
from attnbook.core._checks import check_positive


def step_intensity(
    batch_sizes: Sequence[int], flops: float, weight_bytes: float, cache_bytes: float
) -> np.ndarray:
    """FLOP per byte of one decoding step at each batch size (see the module docstring).

    ``flops`` and ``cache_bytes`` are one sequence's; ``weight_bytes`` is read once per step.
    """
    check_positive("flops", flops)
    check_positive("weight_bytes", weight_bytes)
    check_positive("cache_bytes", cache_bytes)
    batch = np.asarray(batch_sizes, dtype=float)
    if batch.ndim != 1 or batch.size == 0 or not (np.isfinite(batch) & (batch >= 1)).all():
        raise ValueError(
            f"batch_sizes: expected a non-empty sequence of sizes >= 1, got {batch_sizes!r}"
        )
    return batch * flops / (weight_bytes + batch * cache_bytes)


def plot_intensity_vs_batch(
    batch_sizes: Sequence[int],
    curves: dict[str, tuple[Sequence[float], float]],
    ridge: float,
    machine: str,
    largest_fitting: dict[str, int] | None = None,
) -> Figure:
    """Intensity against batch size, log-log: one line per entry, its ceiling dotted.

    ``curves`` maps a label to (the intensity at each of ``batch_sizes``, its ceiling
    ``flops / cache_bytes``). A grey dashed line marks ``ridge``, the intensity at which
    ``machine`` stops being memory-bound. ``largest_fitting`` maps a label of ``curves`` to
    the largest batch whose weights and caches fit in ``machine``'s memory, drawn as a
    vertical dash-dotted line in the curve's colour.
    """
    check_positive("ridge", ridge)
    unknown = set(largest_fitting or {}) - set(curves)
    if unknown:
        raise ValueError(
            f"largest_fitting: expected labels of curves {list(curves)}, got {sorted(unknown)}"
        )
    if not isinstance(curves, dict) or not curves:
        raise ValueError(
            f"curves: expected a non-empty dict of label -> (values, ceiling), got {curves!r}"
        )
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for i, (label, (values, ceiling)) in enumerate(curves.items()):
        if len(values) != len(batch_sizes):
            raise ValueError(
                f"curves[{label!r}]: expected {len(batch_sizes)} values, one per batch size, "
                f"got {len(values)}"
            )
        check_positive(f"curves[{label!r}] ceiling", ceiling)
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        ax.plot(batch_sizes, values, "o-", color=colour, label=label)
        ax.axhline(ceiling, color=colour, linestyle=":", label=f"its ceiling, {ceiling:.0f} FLOP/B")
        if largest_fitting and label in largest_fitting:
            batch = largest_fitting[label]
            check_positive(f"largest_fitting[{label!r}]", batch)
            ax.axvline(batch, color=colour, linestyle="-.", label=f"fits up to batch {batch}")
    ax.axhline(ridge, color="grey", linestyle="--", label=f"ridge point of {machine}: {ridge:.0f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batch_sizes), [str(size) for size in batch_sizes])
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences decoded together)")
    ax.set_ylabel("FLOP per byte read, one step")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
