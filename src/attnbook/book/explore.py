"""An interactive attention explorer that works offline: in the HTML book, JupyterLab and VS Code.

``explore(weights, tokens)`` returns an :class:`AttentionExplorer`, which a notebook displays
through ``_repr_html_``: one self-contained HTML fragment with inline CSS, the weights as JSON
and a small plain-JavaScript program (``explorer/explorer.css`` and ``explorer/explorer.js``,
shipped with the package). It loads nothing from anywhere, so it runs in a static page with no
kernel and no network. It shows

- a heatmap of the selected layer and head in the book's convention (queries as rows, keys as
  columns, origin top-left, viridis as in :func:`attnbook.plot_attention`, one colour scale
  shared by all heads, as in :func:`attnbook.plot_heads`); hovering a cell, or moving the
  selection with the arrow keys, shows query token, key token and weight to 3 decimals;
- a token view: queries on the left, keys on the right, one line per pair whose opacity is the
  weight; hovering or selecting a query shows only its lines;
- a head selector: one thumbnail per (layer, head), grouped by key/value head when
  ``n_kv_heads`` is given (grouped-query attention);
- with ``frame_labels``, a slider that steps through frames (e.g. snapshots taken during
  training): the heatmap, token view and thumbnails show the chosen frame's weights.

The weights are embedded rounded to 3 decimals, and element ids come from a hash of the content,
so re-running a cell gives byte-identical HTML. Where the script does not run (JavaScript off,
or a notebook JupyterLab does not trust) one sentence says what the explorer shows and how to
activate it.
"""

import hashlib
import html
import json
from collections.abc import Sequence
from importlib import resources

import matplotlib
import numpy as np
import torch

from attnbook.book.plotting import CMAP
from attnbook.core._checks import check_int

MAX_CELLS = 250_000  # F * L * H * T * S; beyond this the page gets slow and the HTML large
DECIMALS = 3  # weights are embedded as integers in thousandths
MAX_WEIGHT = 1e12  # its thousandths stay exact integers in JavaScript (below 2^53)
N_COLOURS = 64  # stops of the colormap sent to the page
EXPECTED = "(T, S), (H, T, S) or (L, H, T, S)"
EXPECTED_FRAMES = "(F, T, S), (F, H, T, S) or (F, L, H, T, S) with F = len(frame_labels)"


def _asset(name: str) -> str:
    return resources.files("attnbook.book").joinpath("explorer", name).read_text(encoding="utf-8")


def _read_array(weights: object, expected: str) -> np.ndarray:
    """The weights as a float64 array: any tensor (sparse, on any device) or array-like."""
    is_complex = False
    try:
        if torch.is_tensor(weights):
            if weights.is_meta:
                raise ValueError("a tensor on the meta device holds no values")
            is_complex = weights.is_complex()
            dense = weights.to_dense() if weights.layout != torch.strided else weights
            array = None if is_complex else dense.detach().to("cpu", torch.float64).numpy()
        else:
            array = np.asarray(weights)
            is_complex = np.iscomplexobj(array)
            array = None if is_complex else array.astype(np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"weights: expected a tensor or array of shape {expected}, "
            f"got {type(weights).__name__} ({error})"
        ) from None
    if is_complex:
        raise ValueError(
            "weights: expected real attention weights, got complex ones; pass their absolute "
            "value or real part yourself, as the rest of the library refuses complex input"
        )
    return array


def _as_weights(weights: object, framed: bool) -> np.ndarray:
    """The weights as a float64 (F, L, H, T, S) array, after checking rank, size and values.

    Without frames (``framed`` false) F is 1; with frames the first axis is F.
    """
    expected = EXPECTED_FRAMES if framed else EXPECTED
    array = _read_array(weights, expected)
    ranks = (3, 4, 5) if framed else (2, 3, 4)
    if array.ndim not in ranks:
        raise ValueError(f"weights: expected shape {expected}, got shape {array.shape}")
    if array.size == 0:
        what = "frame, head, query and key" if framed else "head, query and key"
        raise ValueError(f"weights: expected at least one {what}, got shape {array.shape}")
    if array.size > MAX_CELLS:
        axes = "F * L * H * T * S" if framed else "L * H * T * S"
        first = "weights[::2] for every other frame" if framed else "weights[:2] for two layers"
        raise ValueError(
            f"weights: shape {array.shape} has {array.size:,} cells, more than the explorer's "
            f"cap of {MAX_CELLS:,} ({axes}); slice it first, e.g. {first} or heads, "
            f"or weights[..., :64, :64] for the first 64 queries and keys"
        )
    if not np.isfinite(array).all():
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(
            f"weights: expected finite attention weights, got {array[where]} at index {where} "
            f"of shape {array.shape}"
        )
    if (array < 0).any():
        where = tuple(int(i) for i in np.argwhere(array < 0)[0])
        raise ValueError(
            f"weights: expected non-negative attention weights, got {array[where]:.4g} at "
            f"index {where} of shape {array.shape}"
        )
    if (array > MAX_WEIGHT).any():
        where = tuple(int(i) for i in np.argwhere(array > MAX_WEIGHT)[0])
        raise ValueError(
            f"weights: expected weights of at most {MAX_WEIGHT:.0e} (the page holds them as "
            f"integer thousandths), got {float(array[where]):.8g} at index {where} of shape "
            f"{array.shape}; divide by the largest weight to show the pattern"
        )
    ones = (1,) * (max(ranks) - array.ndim)  # the missing layer and head axes
    if framed:
        return array.reshape(array.shape[:1] + ones + array.shape[1:])  # (F, L, H, T, S)
    return array.reshape((1, *ones) + array.shape)  # (1, L, H, T, S)


def _as_labels(name: str, labels: object, count: int, axis: str, shape: tuple) -> list[str]:
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise ValueError(
            f"{name}: expected a list of {count} labels (one per {axis}), "
            f"got {type(labels).__name__}"
        )
    if len(labels) != count:
        raise ValueError(
            f"{name}: expected {count} labels (one per {axis} of weights with shape {shape}), "
            f"got {len(labels)}"
        )
    texts = [str(label) for label in labels]
    for index, text in enumerate(texts):
        _check_text(f"{name}[{index}]", text)
    return texts


def _check_text(name: str, text: str) -> None:
    """``text`` is valid Unicode: no lone surrogate (as ``errors="surrogateescape"`` leaves)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name}: expected text that is valid Unicode, got {text[:40]!r} with a lone "
            f"surrogate {text[error.start]!r} at character {error.start} (as text decoded with "
            f"errors='surrogateescape' holds); decode it with errors='replace'"
        ) from None


def _kv_groups(n_kv_heads: int | None, n_heads: int) -> list[int] | None:
    """The key/value group of each query head: head h reads group h // (H / H_kv)."""
    if n_kv_heads is None:
        return None
    check_int("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_kv_heads: the weights have H = {n_heads} query heads, which n_kv_heads = "
            f"{n_kv_heads} does not divide"
        )
    group_size = n_heads // n_kv_heads
    return [h // group_size for h in range(n_heads)]


def _colours() -> list[str]:
    """``N_COLOURS`` stops of the book's colormap, as hex strings, from weight 0 to the top."""
    cmap = matplotlib.colormaps[CMAP]
    return [matplotlib.colors.to_hex(cmap(i / (N_COLOURS - 1))) for i in range(N_COLOURS)]


def _script_json(payload: dict) -> str:
    """JSON that is safe inside a <script> element (no '<', '>' or '&' characters)."""
    text = json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class AttentionExplorer:
    """Attention weights that display as an interactive explorer in a notebook or the book.

    ``shape`` is (L, H, T, S), ``frames`` the number of frames F (1 without frame labels) and
    ``frame_labels`` their labels (None without); ``html`` is the self-contained fragment that
    ``_repr_html_`` returns.
    """

    def __init__(self, payload: dict) -> None:
        self.shape = tuple(payload[axis] for axis in ("layers", "heads", "queries", "keys"))
        self.frames = payload["frames"]
        self.frame_labels = payload["frameLabels"]
        self.title = payload["title"]
        data = _script_json(payload)
        css, script = _asset("explorer.css"), _asset("explorer.js")
        root_id = "attnx-" + hashlib.sha256((data + css + script).encode()).hexdigest()[:12]
        layers, heads, queries, keys = self.shape
        slider = f", a slider over {self.frames} frame(s)" if self.frame_labels else ""
        fallback = (
            f"This interactive attention explorer (a heatmap to hover, a token view and a head "
            f"selector for {layers} layer(s) of {heads} head(s), {queries} queries by {keys} "
            f"keys{slider}) needs JavaScript: run this cell, or trust the notebook (Trust "
            f"Notebook in JupyterLab's command palette), to activate it."
        )
        self.html = (
            f'<div class="attnx" id="{root_id}">\n<style>\n{css}</style>\n'
            f'<p class="attnx-fallback">{html.escape(fallback)}</p>\n'
            f'<script type="application/json" class="attnx-data">{data}</script>\n'
            f"<script>\n{script}</script>\n</div>\n"
        )

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        layers, heads, queries, keys = self.shape
        frames = f"frames={self.frames}, " if self.frame_labels is not None else ""
        title = f", title={self.title!r}" if self.title else ""
        return (
            f"AttentionExplorer({frames}layers={layers}, heads={heads}, queries={queries}, "
            f"keys={keys}{title})"
        )


def explore(
    weights: torch.Tensor | np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    *,
    title: str | None = None,
    n_kv_heads: int | None = None,
    head_labels: Sequence[str] | None = None,
    frame_labels: Sequence[str] | None = None,
) -> AttentionExplorer:
    """An interactive explorer of attention weights (T, S), (H, T, S) or (L, H, T, S).

    Pick a batch item first (``weights[0]`` of a (B, H, T, S) tensor). With ``frame_labels``
    (one label per frame, shown as given), the weights have one more leading axis, F frames:
    (F, T, S), (F, H, T, S) or (F, L, H, T, S), e.g. one entry per training step, and a slider
    (or the keys ``[`` and ``]``) chooses the frame shown. ``key_tokens`` defaults
    to ``query_tokens`` (self-attention). ``n_kv_heads`` groups the query heads of grouped-query
    attention in the head selector: head h shares key/value head h // (H / n_kv_heads).
    ``head_labels`` names the H heads (default ``head 0``, ``head 1``, ...). At most
    ``MAX_CELLS`` = 250,000 weights (F * L * H * T * S, every frame counted): slice larger
    ones. Weights are real, finite, non-negative and at most ``MAX_WEIGHT`` = 1e12 (rows need
    not sum to 1), shown and embedded to 3 decimals, on one colour scale from 0 to the largest
    weight of every head and frame. Labels are any valid Unicode text, shown as text (never as
    markup); a long one is cut with an ellipsis, its full text in its tooltip and the readout.
    """
    framed = frame_labels is not None
    array = _as_weights(weights, framed)  # (F, L, H, T, S)
    n_frames, n_layers, n_heads, n_queries, n_keys = array.shape
    shape = tuple(
        int(n) for n in (weights.shape if torch.is_tensor(weights) else np.shape(weights))
    )
    frames = _as_labels("frame_labels", frame_labels, n_frames, "frame", shape) if framed else None
    queries = _as_labels("query_tokens", query_tokens, n_queries, "query row", shape)
    if key_tokens is None and n_keys != n_queries:
        raise ValueError(
            f"key_tokens: weights with shape {shape} have {n_keys} keys but {n_queries} "
            f"queries, so the query tokens cannot label the keys: pass key_tokens"
        )
    keys = queries if key_tokens is None else key_tokens
    keys = _as_labels("key_tokens", keys, n_keys, "key column", shape)
    if head_labels is None:
        labels = [f"head {h}" for h in range(n_heads)]
    else:
        labels = _as_labels("head_labels", head_labels, n_heads, "head", shape)
    if title is not None and not isinstance(title, str):
        raise ValueError(f"title: expected a string or None, got {type(title).__name__}")
    if title is not None:
        _check_text("title", title)
    scaled = np.rint(array * 10**DECIMALS).astype(np.int64)  # (F, L, H, T, S) in thousandths
    payload = {
        "colours": _colours(),
        "decimals": DECIMALS,
        "frameLabels": frames,
        "frames": n_frames,
        "groups": _kv_groups(n_kv_heads, n_heads),
        "headLabels": labels,
        "heads": n_heads,
        "keyTokens": keys,
        "keys": n_keys,
        "layers": n_layers,
        "queries": n_queries,
        "queryTokens": queries,
        "title": title,
        "weights": scaled.reshape(-1).tolist(),
    }
    return AttentionExplorer(payload)
