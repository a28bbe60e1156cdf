"""Chapter 6's decoding figures: measured step and read times, and a roofline of decode attention.

:func:`decode_attention_cost` counts one decoding step's attention for one layer: the FLOPs of
the scores and of the weighted sum of values, and the bytes of the cache it reads. Their ratio,
the arithmetic intensity, is ``2 * G / b`` FLOP per byte for groups of ``G = H / H_kv`` query
heads and ``b``-byte elements: each cached number loaded is used in one multiply-add per query
head of its group. :func:`plot_decode_roofline` sets such intensities against an accelerator's
roof, ``min(peak, bandwidth * intensity)``, whose bend (the ridge point, ``peak / bandwidth``)
separates memory-bound work (left) from compute-bound work (right).

:func:`plot_step_vs_read` draws timing tries as bars at their fastest try with a whisker up to
their median, one pair of bars (the step, and reading its cache once) per key/value head count:
on a shared machine other work only adds time, so the fastest try is the least disturbed.

:func:`plot_bytes_per_step` draws the bytes one decoding step reads, the weights once plus every
sequence's cache, against the batch size, one line per key/value head count, with a dot where
the caches come to outweigh the weights.
"""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from attnbook.book.plotting import OKABE_ITO
from attnbook.core._checks import check_int, check_positive


def decode_attention_cost(
    n_heads: int, n_kv_heads: int, cache_length: int, head_dim: int, bytes_per_element: int
) -> tuple[int, int]:
    """(FLOPs, bytes read) of one decoding step's attention in one layer, batch 1.

    FLOPs: ``H`` query heads, each a dot product with ``S`` keys and a weighted sum of ``S``
    values of width ``d_head``, 2 FLOPs per multiply-add: ``4 * H * S * d_head`` (the softmax's
    ``O(H * S)`` is left out). Bytes: every cached key and value read once,
    ``2 * H_kv * S * d_head * b``.
    """
    for name, value in [
        ("n_heads", n_heads),
        ("n_kv_heads", n_kv_heads),
        ("cache_length", cache_length),
        ("head_dim", head_dim),
        ("bytes_per_element", bytes_per_element),
    ]:
        check_int(name, value)
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads: expected a divisor of n_heads={n_heads}, got {n_kv_heads!r}")
    flops = 4 * n_heads * cache_length * head_dim
    n_bytes = 2 * n_kv_heads * cache_length * head_dim * bytes_per_element
    return flops, n_bytes


def plot_decode_roofline(
    intensities: dict[str, float], peak_flops: float, bandwidth: float, machine: str
) -> Figure:
    """A roofline: attainable FLOP/s against FLOP per byte, log-log, with one dot per entry.

    ``intensities`` maps a label to an arithmetic intensity (FLOP per byte); each dot sits on
    the roof ``min(peak_flops, bandwidth * intensity)`` and its legend entry gives the share of
    ``peak_flops`` it can reach. A grey dashed vertical line marks the ridge point,
    ``peak_flops / bandwidth``, labelled with ``machine``.
    """
    check_positive("peak_flops", peak_flops)
    check_positive("bandwidth", bandwidth)
    if not isinstance(intensities, dict) or not intensities:
        raise ValueError(
            f"intensities: expected a non-empty dict of label -> FLOP per byte, got {intensities!r}"
        )
    for label, value in intensities.items():
        check_positive(f"intensities[{label!r}]", value)
    ridge = peak_flops / bandwidth
    low = min(0.25, min(intensities.values()) / 2)
    high = max(8 * ridge, 2 * max(intensities.values()))
    x = np.geomspace(low, high, 200)
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    ax.plot(x, np.minimum(peak_flops, bandwidth * x) / 1e12, color="black", label="roof")
    ax.axvline(
        ridge, color="grey", linestyle="--", label=f"ridge point of {machine}: {ridge:.0f} FLOP/B"
    )
    ax.axvspan(low, ridge, color="grey", alpha=0.1)
    for i, (label, value) in enumerate(intensities.items()):
        attainable = min(peak_flops, bandwidth * value)
        share = f"{attainable / peak_flops:.1%} of peak"
        ax.plot(
            [value],
            [attainable / 1e12],
            "o",
            color=OKABE_ITO[i % len(OKABE_ITO)],
            label=f"{label}: {value:g} FLOP/B, {share}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_xlabel("arithmetic intensity (FLOP per byte read)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.text(low * 1.3, peak_flops / 1e12 * 0.6, "memory-bound", color="dimgrey")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _check_tries(name: str, tries: object) -> dict[int | str, np.ndarray]:
    """``tries`` as arrays; a ValueError naming what is wrong."""
    if not isinstance(tries, dict) or not tries:
        raise ValueError(f"{name}: expected a non-empty dict of H_kv -> times, got {tries!r}")
    arrays = {}
    for key, times in tries.items():
        values = np.asarray(times, dtype=float)
        if values.ndim != 1 or values.size == 0 or not (np.isfinite(values) & (values > 0)).all():
            raise ValueError(
                f"{name}[{key!r}]: expected a non-empty sequence of positive times, got {times!r}"
            )
        arrays[key] = values
    return arrays


def plot_step_vs_read(
    step_tries: dict[int | str, Sequence[float]], read_tries: dict[int | str, Sequence[float]]
) -> Figure:
    """Two bars per key/value head count: a decoding step and reading its cache once.

    Both dicts map ``H_kv`` to the times of every try in seconds (the same keys); an int key is
    labelled ``H_kv = n``, a string key (a control, say) is its own label. A bar stands at the
    fastest try, in milliseconds; its whisker reaches up to the median of the tries.
    """
    steps, reads = _check_tries("step_tries", step_tries), _check_tries("read_tries", read_tries)
    if list(steps) != list(reads):
        raise ValueError(
            f"read_tries: expected the keys of step_tries {list(steps)}, got {list(reads)}"
        )
    fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    centres = np.arange(len(steps))
    for i, (name, tries) in enumerate([("decoding step", steps), ("reading the cache", reads)]):
        ms = [1e3 * values for values in tries.values()]
        fastest = np.array([m.min() for m in ms])
        # no whisker below the bar; above it, up to the median
        spread = np.array([np.zeros_like(fastest), [np.median(m) for m in ms] - fastest])
        ax.bar(
            centres + (i - 0.5) * 0.4,
            fastest,
            width=0.4,
            color=OKABE_ITO[i],
            yerr=spread,
            capsize=4,
            label=f"{name} (fastest try; whisker: up to the median)",
        )
    ax.set_xticks(centres, [n if isinstance(n, str) else f"H_kv = {n}" for n in steps])
    ax.set_ylabel("time (ms)")
    # beside the axes, so no bar's top or whisker hides behind it
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_bytes_per_step(
    weight_bytes: int, cache_bytes: dict[int, int], max_batch: int, bandwidth: float
) -> Figure:
    """Bytes one decoding step reads against the batch size, one line per key/value head count.

    A step reads the weights once, ``weight_bytes``, and the cache of every sequence in the
    batch: ``weight_bytes + batch * cache_bytes[H_kv]`` for batch 1 to ``max_batch``, in GB,
    log-log. A grey dashed line marks the weights alone; a dot marks where the caches weigh as
    much as the weights (batch ``weight_bytes / cache_bytes``), its legend entry the first whole
    batch from which they outweigh them. The right axis is the time to read those bytes once at
    ``bandwidth`` bytes per second, a floor on the step time.
    """
    check_int("weight_bytes", weight_bytes)
    check_int("max_batch", max_batch, low=2)
    check_positive("bandwidth", bandwidth)
    if not isinstance(cache_bytes, dict) or not cache_bytes:
        raise ValueError(
            f"cache_bytes: expected a non-empty dict of H_kv -> bytes per sequence, "
            f"got {cache_bytes!r}"
        )
    for n_kv_heads, size in cache_bytes.items():
        check_int(f"cache_bytes[{n_kv_heads!r}]", size)
    batches = np.arange(1, max_batch + 1)
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    ax.axhline(weight_bytes / 1e9, color="grey", linestyle="--", label="the weights alone")
    for i, (n_kv_heads, size) in enumerate(cache_bytes.items()):
        color = OKABE_ITO[i % len(OKABE_ITO)]
        crossover = weight_bytes / size  # batch at which the caches weigh as much as the weights
        first = int(np.floor(crossover)) + 1  # first whole batch where they weigh more
        ax.plot(
            batches,
            (weight_bytes + batches * size) / 1e9,
            color=color,
            label=f"H_kv = {n_kv_heads}: caches outweigh the weights from batch {first}",
        )
        if crossover <= max_batch:
            ax.plot([crossover], [2 * weight_bytes / 1e9], "o", color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(1, max_batch)
    powers = 2 ** np.arange(int(np.log2(max_batch)) + 1)  # 1, 2, 4, ... up to max_batch
    ax.set_xticks(powers, [str(p) for p in powers])
    ax.set_xlabel("batch size (sequences decoded together)")
    ax.set_ylabel("GB read per decoding step")
    seconds = ax.secondary_yaxis(
        "right", functions=(lambda gb: 1e12 * gb / bandwidth, lambda ms: ms * bandwidth / 1e12)
    )
    seconds.set_ylabel(f"ms at {bandwidth / 1e12:g} TB/s")
    for axis in (ax.yaxis, seconds.yaxis):  # plain 10, 20, 50, 100, ..., not 2 x 10^1
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8, loc="upper left")
    return fig
