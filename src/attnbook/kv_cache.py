"""A key/value cache for one attention layer: what a decoder keeps so it never recomputes it.

While a model generates text, the keys and values of the tokens already seen never change. A
:class:`KVCache` stores them, (B, H_kv, S, d_head) each, and grows by the new positions every
time :meth:`KVCache.append` is called. ``GroupedQueryAttention.forward(..., cache=cache)``
appends the layer's new keys and values and attends over everything cached; a model with L
layers keeps L caches. :func:`kv_cache_bytes_per_token` is the arithmetic of what that costs.
"""

import torch
from torch import Tensor

from attnbook._checks import check_int, check_same_dtype, check_tensor, shape_of


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
