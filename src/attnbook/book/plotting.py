"""Attention heatmaps in the book's one convention.

Queries are rows and keys are columns, the origin is the top-left corner (query 0, key 0),
tokens label the axes, and a colorbar gives the scale. Weights (:func:`plot_attention`) use
viridis, which reads in greyscale and for colour-blind readers; raw scores (:func:`plot_scores`)
use a diverging red-blue scale centred on zero, since they can be negative; boolean masks
(:func:`plot_mask`) use two colours. :func:`plot_schedule` draws a serving engine's batching
schedule: requests as rows, decoding steps as columns. :func:`plot_cache_budget` draws how a
batch's KV cache grows against a memory budget, :func:`plot_grouped_bars` sets results side by
side as labelled bars, and :func:`plot_gains` draws measured gains as grouped bars with
standard-error bars.

:func:`use_book_style` gives every figure of the book one look: readable font sizes and the
Okabe-Ito line colours, which stay distinct for colour-blind readers and contain no grey (the
chapters draw reference lines in grey). It leaves figure sizes and resolution alone. Each
chapter calls it once; importing attnbook leaves matplotlib's settings as they were.
"""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, ListedColormap
from matplotlib.figure import Figure

from attnbook.core._checks import check_int

CMAP = "viridis"
SCORE_CMAP = "RdBu_r"
CELL_INCHES = 0.45
MASK_CMAP = ListedColormap(["#f0f0f0", "#0072B2"])
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
BOOK_STYLE = {
    "axes.prop_cycle": cycler(color=OKABE_ITO),
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 13,
    "image.cmap": CMAP,
    "axes.grid": False,
    "lines.linewidth": 2.0,
}


def use_book_style() -> None:
    """Set the book's figure style: colour-blind-safe colours and readable fonts."""
    plt.rcParams.update(BOOK_STYLE)


def _as_array(weights: torch.Tensor | np.ndarray, name: str, rank: int, layout: str) -> np.ndarray:
    array = (
        weights.detach().float().cpu().numpy() if torch.is_tensor(weights) else np.asarray(weights)
    )
    if array.ndim != rank:
        raise ValueError(f"{name}: expected shape {layout}, got shape {tuple(array.shape)}")
    return array


def _check_labels(name: str, labels: Sequence[str] | None, count: int, axis: str) -> None:
    if labels is not None and len(labels) != count:
        raise ValueError(f"{name}: expected {count} labels (one per {axis}), got {len(labels)}")


def _label_axes(ax: Axes, query_labels, key_labels, *, show_x: bool, show_y: bool) -> None:
    """Token labels and axis names; ``show_x``/``show_y`` False hides them on inner grid cells."""
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), labels=[str(t) for t in key_labels], rotation=90)
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), labels=[str(t) for t in query_labels])
    ax.tick_params(labelbottom=show_x, labelleft=show_y)
    if show_x:
        ax.set_xlabel("key")
    if show_y:
        ax.set_ylabel("query")


def _heatmap(
    matrix: np.ndarray,
    query_labels: Sequence[str] | None,
    key_labels: Sequence[str] | None,
    *,
    ax: Axes | None,
    title: str | None,
    image_options: dict,
    colorbar_label: str,
) -> Axes:
    """One (T, S) matrix in the book's convention, with the given colour scale and label."""
    _check_labels("query_labels", query_labels, matrix.shape[0], "query row")
    _check_labels("key_labels", key_labels, matrix.shape[1], "key column")
    if ax is None:
        width = max(3.0, CELL_INCHES * matrix.shape[1] + 1.5)
        height = max(2.5, CELL_INCHES * matrix.shape[0] + 0.8)
        _, ax = plt.subplots(figsize=(width, height), layout="constrained")
    image = ax.imshow(matrix, origin="upper", **image_options)
    ax.figure.colorbar(image, ax=ax, label=colorbar_label)
    _label_axes(ax, query_labels, key_labels, show_x=True, show_y=True)
    if title:
        ax.set_title(title)
    return ax


def _grey_blocked(values: np.ndarray, mask: object, layout: str) -> tuple[np.ndarray, Colormap]:
    """``values`` with the entries a boolean ``mask`` blocks hidden, and the weights' colormap
    that draws hidden entries light grey (``mask`` None: both unchanged)."""
    cmap = plt.get_cmap(CMAP)
    if mask is None:
        return values, cmap
    allowed = _allowed(mask, values.ndim, layout)
    if allowed.shape != values.shape:
        raise ValueError(f"mask: expected the weights' shape {values.shape}, got {allowed.shape}")
    return np.ma.masked_where(~allowed, values), cmap.with_extremes(bad="lightgrey")


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    mask: torch.Tensor | np.ndarray | None = None,
) -> Axes:
    """Draw one (T, S) weight matrix: query t is row t, key s is column s. Returns the axes.

    With a (T, S) boolean ``mask`` (True = may attend), blocked entries are drawn in light grey,
    so a blocked pair can be told apart from an allowed one whose weight is 0.
    """
    matrix, cmap = _grey_blocked(_as_array(weights, "weights", 2, "(T, S)"), mask, "(T, S)")
    options = {"cmap": cmap, "vmin": 0.0}
    return _heatmap(
        matrix,
        query_labels,
        key_labels,
        ax=ax,
        title=title,
        image_options=options,
        colorbar_label="attention weight",
    )


def _allowed(mask: torch.Tensor | np.ndarray, ndim: int, layout: str) -> np.ndarray:
    """A boolean mask (True = may attend) as a numpy array, or a ValueError naming it."""
    dtype = mask.dtype if torch.is_tensor(mask) else np.asarray(mask).dtype
    if dtype not in (torch.bool, np.bool_):
        raise ValueError(f"mask: expected a boolean mask (True = may attend), got dtype {dtype}")
    return _as_array(mask, "mask", ndim, layout).astype(bool)


def plot_scores(
    scores: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    label: str = "score",
) -> Axes:
    """Draw one (T, S) matrix of raw scores on a diverging scale centred on zero.

    Scores are not weights: they can be negative and do not sum to one, so they get a
    red-blue colormap symmetric about 0 and their own colorbar ``label``. Masked (-inf)
    entries are drawn in grey. Returns the axes.
    """
    matrix = _as_array(scores, "scores", 2, "(T, S)")
    finite = matrix[np.isfinite(matrix)]
    limit = float(np.abs(finite).max()) if finite.size else 1.0
    limit = limit if limit > 0 else 1.0
    cmap = plt.get_cmap(SCORE_CMAP).with_extremes(bad="lightgrey")
    masked = np.ma.masked_invalid(matrix)
    options = {"cmap": cmap, "vmin": -limit, "vmax": limit}
    return _heatmap(
        masked,
        query_labels,
        key_labels,
        ax=ax,
        title=title,
        image_options=options,
        colorbar_label=label,
    )


def plot_mask(
    mask: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw one (T, S) boolean mask (True = may attend) in two colours with a two-tick colorbar."""
    dtype = mask.dtype if torch.is_tensor(mask) else np.asarray(mask).dtype
    if dtype not in (torch.bool, np.bool_):
        raise ValueError(f"mask: expected a boolean mask (True = may attend), got dtype {dtype}")
    matrix = _as_array(mask, "mask", 2, "(T, S)")
    options = {"cmap": MASK_CMAP, "vmin": 0, "vmax": 1}
    ax = _heatmap(
        matrix.astype(np.int8),
        query_labels,
        key_labels,
        ax=ax,
        title=title,
        image_options=options,
        colorbar_label="may attend",
    )
    colorbar = ax.images[-1].colorbar
    colorbar.set_ticks([0.25, 0.75], labels=["False", "True"])
    return ax


def plot_heads(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    titles: Sequence[str] | None = None,
    ncols: int = 4,
    suptitle: str | None = None,
    mask: torch.Tensor | np.ndarray | None = None,
) -> Figure:
    """Draw each head of (H, T, S) weights in a grid with one shared colour scale and colorbar.

    Pick a batch item first (``weights[0]`` of a (B, H, T, S) tensor). Titles default to
    ``head 0``, ``head 1``, ...; returns the figure. With an (H, T, S) boolean ``mask``
    (True = may attend), blocked entries are drawn in light grey, as in :func:`plot_attention`.
    """
    stack = _as_array(weights, "weights", 3, "(H, T, S); index a batch item first")
    stack, cmap = _grey_blocked(stack, mask, "(H, T, S)")
    n_heads, n_queries, n_keys = stack.shape
    if n_heads == 0:
        raise ValueError(f"weights: expected at least one head, got shape {stack.shape}")
    check_int("ncols", ncols)
    _check_labels("query_labels", query_labels, n_queries, "query row")
    _check_labels("key_labels", key_labels, n_keys, "key column")
    _check_labels("titles", titles, n_heads, "head")
    ncols = min(ncols, n_heads)
    nrows = -(-n_heads // ncols)
    cell_w = max(2.2, CELL_INCHES * 0.7 * n_keys + 0.8)  # heatmap plus query labels
    cell_h = max(2.2, CELL_INCHES * 0.7 * n_queries + 1.3)  # plus title and rotated key labels
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(cell_w * ncols + 1.0, cell_h * nrows),
        squeeze=False,
        layout="constrained",
    )
    vmax = float(stack.max()) if stack.size else 1.0
    for index, ax in enumerate(axes.flat):
        if index >= n_heads:
            ax.set_visible(False)
            continue
        image = ax.imshow(stack[index], cmap=cmap, vmin=0.0, vmax=vmax, origin="upper")
        row, col = divmod(index, ncols)
        _label_axes(
            ax,
            query_labels,
            key_labels,
            show_x=row == nrows - 1 or index + ncols >= n_heads,
            show_y=col == 0,
        )
        ax.set_title(titles[index] if titles is not None else f"head {index}")
    fig.colorbar(image, ax=axes, label="attention weight", shrink=0.8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# a batching schedule's cells: finished (or never decoded), waiting, decoding, wasted
# (a padding row, or a token dropped when its request was preempted)
SCHEDULE_COLORS = ("#ffffff", "#F0E442", "#0072B2", "#999999")
SCHEDULE_STATES = (
    "waiting",
    "decoding (token kept)",
    "not kept (padding, or dropped at preemption)",
)
SHARE_COLORS = ("#D55E00", "#000000", "#CC79A7", "#009E73")  # none is a cell state's colour


def _schedule_grid(schedule: Sequence[dict[int, bool]], n_requests: int) -> np.ndarray:
    """(requests, steps) codes: 0 finished, 1 waiting, 2 decoding, 3 not kept."""
    grid = np.zeros((n_requests, len(schedule)), dtype=np.int8)
    for step, rows in enumerate(schedule):
        for request, kept in rows.items():
            grid[request, step] = 2 if kept else 3
    for request in range(n_requests):
        active = np.flatnonzero(grid[request])
        if active.size:  # waiting until its last row, wherever it has none
            span = grid[request, : active[-1]]
            span[span == 0] = 1
    return grid


def _check_schedule(name: str, schedule: object, n_requests: int, max_batch: int) -> None:
    if not isinstance(schedule, Sequence) or not schedule:
        raise ValueError(f"schedules: {name!r} should list at least one step, got {schedule!r}")
    for step, rows in enumerate(schedule):
        if not isinstance(rows, dict) or not 0 < len(rows) <= max_batch:
            raise ValueError(
                f"schedules: step {step} of {name!r} should map 1 to max_batch = {max_batch} "
                f"requests to whether their token is kept, got {rows!r}"
            )
        if any(not isinstance(r, int) or not 0 <= r < n_requests for r in rows):
            raise ValueError(
                f"schedules: step {step} of {name!r} names a request outside "
                f"[0, n_requests = {n_requests}), got {list(rows)}"
            )


def plot_schedule(
    schedules: dict[str, Sequence[dict[int, bool]]], n_requests: int, max_batch: int
) -> Figure:
    """Draw batched decoding schedules as Gantt charts, then each step's useful share of slots.

    ``schedules`` maps a name to a schedule in `attnbook.serving.ServeStats`' form: one dict per
    batched decoding step, from each request with a row in it to whether that row's token is
    kept. Each schedule gets a panel with requests as rows and steps as columns: a request is
    waiting (yellow) until its last row wherever it has none, decoding (blue), padding (grey)
    when its row computes a token nobody keeps, and white once finished. The last panel plots
    the kept rows of each step over ``max_batch``, the share of batch slots doing useful work.
    """
    check_int("n_requests", n_requests)
    check_int("max_batch", max_batch)
    if not isinstance(schedules, dict) or not schedules:
        raise ValueError(f"schedules: expected a non-empty dict of schedules, got {schedules!r}")
    for name, schedule in schedules.items():
        _check_schedule(name, schedule, n_requests, max_batch)
    n_steps = max(len(s) for s in schedules.values())
    heights = [0.2 * n_requests + 0.6] * len(schedules) + [1.8]
    fig, axes = plt.subplots(
        len(schedules) + 1,
        1,
        figsize=(9, sum(heights)),
        sharex=True,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    cmap = ListedColormap(SCHEDULE_COLORS)
    for ax, (name, schedule) in zip(axes, schedules.items(), strict=False):
        grid = _schedule_grid(schedule, n_requests)
        ax.imshow(
            grid,
            cmap=cmap,
            vmin=-0.5,
            vmax=3.5,
            aspect="auto",
            interpolation="nearest",
            extent=(-0.5, len(schedule) - 0.5, n_requests - 0.5, -0.5),
        )
        kept = int((grid == 2).sum())
        ax.set_title(
            f"{name}: {len(schedule)} steps, {kept} of {len(schedule) * max_batch} "
            f"slots decode a kept token"
        )
        ax.set_yticks(range(n_requests))
        ax.set_ylabel("request")
        ax.set_xlim(-0.5, n_steps - 0.5)
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor=color, edgecolor="black", linewidth=0.5)
        for color in SCHEDULE_COLORS[1:]
    ]
    # outside the panel, so that it covers no request's row
    axes[0].legend(
        handles, SCHEDULE_STATES, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8
    )
    useful = axes[-1]
    for i, (name, schedule) in enumerate(schedules.items()):
        share = [sum(rows.values()) / max_batch for rows in schedule]
        color = SHARE_COLORS[i % len(SHARE_COLORS)]
        useful.step(range(len(schedule)), share, where="mid", label=name, color=color)
    useful.set(
        ylim=(0, 1.05),
        xlabel="batched decoding step",
        ylabel=f"kept rows / {max_batch}",
    )
    useful.legend(loc="lower left", fontsize=8)
    return fig


def plot_grouped_bars(
    values: dict[str, Sequence[float]],
    series: Sequence[str],
    *,
    xlabel: str = "",
    title: str | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Horizontal bars, one group per row of ``values`` (top to bottom in its order), one bar
    per entry of ``series`` within each group (in the Okabe-Ito colours), each bar labelled with
    its value to 3 decimals. ``values`` maps a row name to one finite number per series."""
    if not isinstance(values, dict) or not values:
        raise ValueError(f"values: expected a non-empty dict of rows, got {values!r}")
    if isinstance(series, str) or not series:
        raise ValueError(f"series: expected a non-empty sequence of names, got {series!r}")
    for name, row in values.items():
        if len(row) != len(series) or not np.isfinite(np.asarray(row, dtype=float)).all():
            raise ValueError(
                f"values: row {name!r} needs {len(series)} finite numbers (one per series "
                f"{list(series)}), got {list(row)!r}"
            )
    if ax is None:
        height = 0.3 * len(values) * len(series) + 1.0
        ax = plt.subplots(figsize=(8, height), layout="constrained")[1]
    bar = 0.8 / len(series)
    for i, name in enumerate(series):
        centres = np.arange(len(values)) + (i - (len(series) - 1) / 2) * bar
        heights = [row[i] for row in values.values()]
        color = OKABE_ITO[i % len(OKABE_ITO)]
        bars = ax.barh(centres, heights, height=bar, label=name, color=color)
        ax.bar_label(bars, fmt="%.3f", padding=2, fontsize=8)
    ax.set_yticks(range(len(values)), list(values))
    ax.invert_yaxis()  # the first row on top
    ax.set_xlabel(xlabel)
    ax.margins(x=0.12)
    if title is not None:
        ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    return ax


def plot_cache_budget(
    bytes_per_sequence: dict[str, int], memory_bytes: int, memory_label: str, max_sequences: int
) -> Figure:
    """Draw each model's KV cache against the number of sequences in a batch, and a budget.

    ``bytes_per_sequence`` maps a model's name to the bytes one sequence caches; each model is
    a straight line of GiB against 0 to ``max_sequences`` sequences, with a dot where it
    reaches ``memory_bytes`` (a grey dashed line labelled ``memory_label``) and the number of
    whole sequences that fit, ``memory_bytes // bytes``, in its legend entry. Models that
    cache the same bytes share one line, their names joined by "and".
    """
    check_int("memory_bytes", memory_bytes)
    check_int("max_sequences", max_sequences)
    if not isinstance(bytes_per_sequence, dict) or not bytes_per_sequence:
        raise ValueError(
            f"bytes_per_sequence: expected a non-empty dict of name -> bytes, "
            f"got {bytes_per_sequence!r}"
        )
    for name, size in bytes_per_sequence.items():
        check_int(f"bytes_per_sequence[{name!r}]", size)
    same_size: dict[int, list[str]] = {}  # models that cache alike share one line
    for name, size in bytes_per_sequence.items():
        same_size.setdefault(size, []).append(name)
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    sequences = np.array([0, max_sequences])
    for size, names in same_size.items():
        fit = memory_bytes // size
        label = f"{' and '.join(names)}: {fit} fit"
        (line,) = ax.plot(sequences, sequences * size / 2**30, label=label)
        if fit <= max_sequences:
            ax.plot([fit], [fit * size / 2**30], "o", color=line.get_color())
    ax.axhline(memory_bytes / 2**30, color="grey", linestyle="--", label=memory_label)
    ax.set(
        xlim=(0, max_sequences),
        ylim=(0, 1.5 * memory_bytes / 2**30),
        xlabel="sequences in the batch",
        ylabel="KV cache (GiB)",
    )
    ax.legend(loc="lower right", fontsize=9)
    return fig


def _check_gains(gains: object) -> list[str]:
    """The categories shared by every series of ``gains``; a ValueError naming what is wrong."""
    if not isinstance(gains, dict) or not gains:
        raise ValueError(f"gains: expected a non-empty dict of series, got {gains!r}")
    categories = None
    for series, values in gains.items():
        if not isinstance(values, dict) or not values:
            raise ValueError(f"gains[{series!r}]: expected a non-empty dict, got {values!r}")
        if categories is None:
            categories = list(values)
        elif list(values) != categories:
            raise ValueError(
                f"gains[{series!r}]: expected the categories {categories}, got {list(values)}"
            )
        for category, pair in values.items():
            ok = isinstance(pair, tuple | list) and len(pair) == 2
            ok = ok and all(isinstance(x, int | float) and np.isfinite(x) for x in pair)
            if not ok or pair[1] < 0:
                raise ValueError(
                    f"gains[{series!r}][{category!r}]: expected (mean, standard error), finite "
                    f"and the error >= 0, got {pair!r}"
                )
    return categories


def plot_gains(
    gains: dict[str, dict[str, tuple[float, float]]],
    ax: Axes | None = None,
    *,
    title: str | None = None,
    ylabel: str = "loss saved (nats)",
) -> Axes:
    """Draw measured gains as grouped bars, each with an error bar of one standard error.

    ``gains`` maps a series (a model) to a dict from a category (what was changed, e.g. the key
    kept beside a window) to ``(mean, standard_error)``; every series has the same categories in
    the same order. Each category gets one bar per series, side by side; bars above the grey
    zero line save loss, bars below cost it. Draws on ``ax`` (a new figure when None) and
    returns it.
    """
    categories = _check_gains(gains)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 * len(categories) + 2, 3.5), layout="constrained")
    width = 0.8 / len(gains)
    positions = np.arange(len(categories))
    for index, (series, values) in enumerate(gains.items()):
        means, errors = zip(*values.values(), strict=True)
        offset = (index - (len(gains) - 1) / 2) * width
        ax.bar(positions + offset, means, width, yerr=errors, capsize=3, label=series)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(positions, categories)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    if len(gains) > 1:
        ax.legend()
    return ax
