"""The least time a decoding step can take, split into reading the weights and reading the cache.

A decoding step reads every weight once, for the whole batch, and every sequence's KV cache once.
At a memory bandwidth of ``bandwidth`` bytes per second, reading those bytes takes at least
``(weight_bytes + cache_bytes_per_token * T * batch) / bandwidth`` seconds: a floor on the step,
since decoding is memory-bound. :func:`step_read_ms` computes the two parts of that floor and
:func:`plot_step_read_time` draws them as stacked bars, one pair per (context, batch) case.
"""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attnbook.book.plotting import OKABE_ITO
from attnbook.core._checks import check_int

WEIGHT_COLOUR = "#bbbbbb"  # grey: the same bytes for every variant


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def step_read_ms(
    weight_bytes: float, cache_bytes_per_token: int, context: int, batch: int, bandwidth: float
) -> tuple[float, float]:
    """(weights, cache): milliseconds to read each once at ``bandwidth`` bytes per second.

    The weights are read once for the whole batch; each of the ``batch`` sequences reads its own
    cache of ``context`` tokens at ``cache_bytes_per_token`` bytes each.
    """
    weight_bytes = _check_positive("weight_bytes", weight_bytes)
    bandwidth = _check_positive("bandwidth", bandwidth)
    check_int("cache_bytes_per_token", cache_bytes_per_token)
    check_int("context", context)
    check_int("batch", batch)
    cache_bytes = cache_bytes_per_token * context * batch
    return 1e3 * weight_bytes / bandwidth, 1e3 * cache_bytes / bandwidth


def plot_step_read_time(
    weight_bytes: float,
    cache_bytes_per_token: dict[str, int],
    cases: Sequence[tuple[int, int]],
    bandwidth: float,
    *,
    bandwidth_label: str = "",
) -> Figure:
    """Horizontal stacked bars: a step's weight read (grey) and cache read (colour), in ms.

    One group per ``(context, batch)`` in ``cases`` (top to bottom in its order), one bar per
    variant of ``cache_bytes_per_token`` (a name mapped to its bytes per token over all
    layers), each bar labelled with its total. ``bandwidth_label`` (say "an H100 SXM's
    3.35 TB/s") goes into the x-axis label.
    """
    if not isinstance(cache_bytes_per_token, dict) or not cache_bytes_per_token:
        raise ValueError(
            "cache_bytes_per_token: expected a non-empty dict of name -> bytes per token, "
            f"got {cache_bytes_per_token!r}"
        )
    if isinstance(cases, str) or not cases:
        raise ValueError(f"cases: expected a non-empty sequence of (context, batch), got {cases!r}")
    for case in cases:
        if not isinstance(case, tuple) or len(case) != 2:
            raise ValueError(f"cases: expected (context, batch) pairs, got {case!r}")
    names = list(cache_bytes_per_token)
    n_bars = len(names)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) * n_bars + 1.6), layout="constrained")
    bar = 0.8 / n_bars
    for i, name in enumerate(names):
        parts = [
            step_read_ms(weight_bytes, cache_bytes_per_token[name], context, batch, bandwidth)
            for context, batch in cases
        ]
        weights_ms = np.array([weights for weights, _ in parts])
        cache_ms = np.array([cache for _, cache in parts])
        centres = np.arange(len(cases)) + (i - (n_bars - 1) / 2) * bar
        weight_label = "weights (every variant)" if i == 0 else None
        ax.barh(centres, weights_ms, height=bar, color=WEIGHT_COLOUR, label=weight_label)
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        stacked = ax.barh(
            centres, cache_ms, height=bar, left=weights_ms, color=colour, label=f"{name} cache"
        )
        labels = [f"{name}: {total:.1f} ms" for total in weights_ms + cache_ms]
        ax.bar_label(stacked, labels, padding=3, fontsize=8)
    ax.set_yticks(range(len(cases)), [f"T = {t:,}\nbatch {b}" for t, b in cases])
    ax.invert_yaxis()  # the first case on top
    ax.margins(x=0.25)
    ax.set_xlim(left=0)
    read_at = f" at {bandwidth_label}" if bandwidth_label else ""
    ax.set_xlabel(f"least time per decoding step (ms): bytes read{read_at}")
    ax.legend(loc="lower right", fontsize=9)
    return fig
