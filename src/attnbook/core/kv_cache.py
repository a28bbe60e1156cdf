"""A key/value cache for one attention layer: what a decoder keeps so it never recomputes it.

While a model generates text, the keys and values of the tokens already seen never change. A
:class:`KVCache` stores them, (B, H_kv, S, d_head) each, and grows by the new positions every
time :meth:`KVCache.append` is called. ``GroupedQueryAttention.forward(..., cache=cache)``
appends the layer's new keys and values and attends over everything cached; a model with L
layers keeps L caches. :func:`kv_cache_bytes_per_token` is the arithmetic of what that costs.
A sliding-window layer needs only the last ``window`` positions: :class:`RollingKVCache` keeps
those and drops the rest, so its memory stays constant however long the text grows.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_int, check_same_dtype, check_tensor, shape_of


class KVCache:
    """The keys and values of every position seen so far by one attention layer.

    ``keys`` and ``values`` are None until the first :meth:`append`, then (B, H_kv, S, d_head)
    with S the number of cached positions (``len(cache)``). Appending concatenates along S, so
    each call copies the whole cache: simple, and fine for a book; serving systems preallocate.
    """

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        """The number of cached positions S (0 for an empty cache)."""
        return 0 if self.keys is None else self.keys.size(2)

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"KVCache(positions={len(self)}, keys and values of shape {shape})"

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values together (numel * element size)."""
        if self.keys is None or self.values is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values))

    def _check_new(self, keys: Tensor, values: Tensor) -> None:
        layout = "(B, H_kv, T, d_head)"
        check_tensor("keys", keys, layout, rank=4)
        check_tensor("values", values, layout, rank=4)
        check_same_dtype("values", values, keys, "keys")
        if values.shape != keys.shape:
            raise ValueError(
                f"values: expected the shape of keys {shape_of(keys)}, got {shape_of(values)}"
            )
        if self.keys is None:
            return
        cached, new = self.keys.shape, keys.shape
        if (new[0], new[1], new[3]) != (cached[0], cached[1], cached[3]):
            raise ValueError(
                f"keys: expected (B, H_kv, T, d_head) with B, H_kv, d_head = {cached[0]}, "
                f"{cached[1]}, {cached[3]} as in the cache, got keys.shape = {shape_of(keys)}"
            )
        check_same_dtype("keys", keys, self.keys, "the cache")
        if keys.device != self.keys.device:
            raise ValueError(f"keys: on {keys.device}, but the cache is on {self.keys.device}")

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add T new positions, keys and values (B, H_kv, T, d_head); return all S cached.

        The returned tensors are (B, H_kv, S, d_head) with the new positions last. A shape,
        dtype or device that does not fit the cache raises ``ValueError`` and leaves it as it was.
        """
        self._check_new(keys, values)
        if self.keys is None or self.values is None:
            self.keys, self.values = keys, values
        else:
            self.keys = torch.cat([self.keys, keys], dim=2)  # (B, H_kv, S, d_head)
            self.values = torch.cat([self.values, values], dim=2)  # (B, H_kv, S, d_head)
        return self.keys, self.values


class RollingKVCache(KVCache):
    """A cache for a sliding-window layer: it keeps only the last ``window`` positions.

    ``len(cache)`` counts every position seen so far (what positions and rotary angles need:
    the next token is at position ``len(cache)``), while ``n_cached`` counts the ones held,
    at most ``window``. :meth:`append` returns the held positions followed by the new ones
    (``n_cached + T``, all that the T new queries of a window-``window`` layer can see; attend
    with ``sliding_window_mask(T, window, n_cached + T)``), then drops all but the last
    ``window``. Memory is constant in the length of the text. A layer with a smaller window
    may use it too: its mask then reads only the last keys of those returned.
    """

    def __init__(self, window: int) -> None:
        check_int("window", window)
        super().__init__()
        self.window = window
        self.seen = 0

    def __len__(self) -> int:
        """The number of positions seen so far, held or dropped."""
        return self.seen

    @property
    def n_cached(self) -> int:
        """The number of positions held: min(len(self), window)."""
        return 0 if self.keys is None else self.keys.size(2)

    def __repr__(self) -> str:
        return (
            f"RollingKVCache(window={self.window}, positions seen={self.seen}, "
            f"held={self.n_cached})"
        )

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add T new positions (B, H_kv, T, d_head); return the held ones and the new ones.

        The returned keys and values are (B, H_kv, n_cached + T, d_head), the new positions
        last; afterwards the cache holds only their last ``window`` positions.
        """
        self._check_new(keys, values)
        if self.keys is None or self.values is None:
            all_keys, all_values = keys, values
        else:
            all_keys = torch.cat([self.keys, keys], dim=2)  # (B, H_kv, n_cached + T, d_head)
            all_values = torch.cat([self.values, values], dim=2)  # (B, H_kv, n_cached + T, d)
        self.seen += keys.size(2)
        first_kept = max(0, all_keys.size(2) - self.window)
        self.keys = all_keys[:, :, first_kept:].clone()  # (B, H_kv, <= window, d_head)
        self.values = all_values[:, :, first_kept:].clone()  # (B, H_kv, <= window, d_head)
        return all_keys, all_values


def kv_cache_bytes_per_token(
    n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_element: int | torch.dtype = 2
) -> int:
    """Bytes a decoder caches per token: 2 (K and V) * layers * KV heads * head width * bytes.

    ``bytes_per_element`` is an int (2 for float16 or bfloat16, 4 for float32) or a torch dtype,
    whose ``itemsize`` is used. Multiply by the number of tokens (and the batch size) for a
    whole cache.
    """
    check_int("n_layers", n_layers)
    check_int("n_kv_heads", n_kv_heads)
    check_int("head_dim", head_dim)
    if isinstance(bytes_per_element, torch.dtype):
        bytes_per_element = bytes_per_element.itemsize
    check_int("bytes_per_element", bytes_per_element)
    return 2 * n_layers * n_kv_heads * head_dim * bytes_per_element


def kv_cache_bytes(
    n_tokens: int,
    *,
    n_layers: int,
    n_kv_heads: int,
    head_dim: int,
    n_local_layers: int = 0,
    window: int | None = None,
    bytes_per_element: int | torch.dtype = 2,
) -> int:
    """Bytes of one sequence's cache after ``n_tokens`` tokens, some layers sliding-window.

    Of the ``n_layers`` layers, ``n_local_layers`` attend to the last ``window`` positions and
    keep a :class:`RollingKVCache` of min(n_tokens, window) positions; the others keep all
    ``n_tokens``. Every layer costs ``kv_cache_bytes_per_token(1, n_kv_heads, head_dim,
    bytes_per_element)`` per position held.
    """
    check_int("n_tokens", n_tokens)
    check_int("n_local_layers", n_local_layers, low=0, high=n_layers)
    if n_local_layers and window is None:
        raise ValueError(f"window: {n_local_layers} sliding-window layers need a window, got None")
    per_layer = kv_cache_bytes_per_token(n_layers, n_kv_heads, head_dim, bytes_per_element)
    per_layer //= n_layers  # bytes per position per layer
    if window is not None:
        check_int("window", window)
    local_positions = 0 if window is None else min(n_tokens, window)
    held = (n_layers - n_local_layers) * n_tokens + n_local_layers * local_positions
    return per_layer * held


def latent_cache_bytes_per_token(
    n_layers: int, latent_dim: int, rope_dim: int = 0, bytes_per_element: int | torch.dtype = 2
) -> int:
    """Bytes multi-head latent attention caches per token: layers * (latent + rotary) * bytes.

    One latent of ``latent_dim`` numbers and one shared rotary key of ``rope_dim`` per layer
    and token replace the 2 * H_kv * d_head numbers of :func:`kv_cache_bytes_per_token`.
    """
    check_int("n_layers", n_layers)
    check_int("latent_dim", latent_dim)
    check_int("rope_dim", rope_dim, low=0)
    if isinstance(bytes_per_element, torch.dtype):
        bytes_per_element = bytes_per_element.itemsize
    check_int("bytes_per_element", bytes_per_element)
    return n_layers * (latent_dim + rope_dim) * bytes_per_element
