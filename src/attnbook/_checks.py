"""Input checks shared by the attention functions and modules.

Every check raises ``ValueError`` before any arithmetic, naming the argument, what it got and
what it expected, so a reader sees the mistake rather than a broadcasting error deep inside.
"""

import torch
from torch import Tensor


def shape_of(tensor: Tensor) -> str:
    """A tensor's shape written as a plain tuple, e.g. ``(2, 4, 8)`` or ``(8,)``."""
    return str(tuple(tensor.shape))


def check_int(name: str, value: object, low: int = 1, high: int | None = None) -> None:
    """``value`` is an int (not a bool) in [low, high]; ``high=None`` means no upper bound."""
    bad_type = isinstance(value, bool) or not isinstance(value, int)
    if bad_type or value < low or (high is not None and value > high):
        if high is not None:
            expected = f"an int in [{low}, {high}]"
        else:
            expected = "a positive int" if low == 1 else f"an int >= {low}"
        raise ValueError(f"{name}: expected {expected}, got {value!r}")


def check_probability(name: str, p: float) -> None:
    """Dropout probabilities live in [0, 1): p = 1 would drop every weight."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1), got {p!r}")


def check_tensor(name: str, tensor: object, layout: str, rank: int | None = None) -> None:
    """``tensor`` is a tensor of exactly ``rank`` dims (or at least 2 when ``rank`` is None)."""
    if not isinstance(tensor, Tensor):
        raise ValueError(
            f"{name}: expected a tensor of shape {layout}, got {type(tensor).__name__}"
        )
    if rank is None and tensor.dim() < 2:
        raise ValueError(
            f"{name}: expected shape {layout} with at least 2 dims, got {name}.shape = "
            f"{shape_of(tensor)}"
        )
    if rank is not None and tensor.dim() != rank:
        raise ValueError(
            f"{name}: expected shape {layout} ({rank} dims), got {name}.shape = {shape_of(tensor)}"
        )


def check_model_input(name: str, tensor: object, layout: str, d_model: int) -> None:
    """``tensor`` is a 3-dim (B, length, D) input to a module of width ``d_model``."""
    check_tensor(name, tensor, layout, rank=3)
    if tensor.size(-1) != d_model:
        raise ValueError(
            f"{name}: expected shape {layout} with D = d_model = {d_model}, "
            f"got {name}.shape = {shape_of(tensor)}"
        )


def check_same_batch_dims(name: str, tensor: Tensor, query: Tensor) -> None:
    """``tensor`` (..., S, x) has the same batch dims ``...`` as ``query`` (..., T, d)."""
    if tensor.shape[:-2] != query.shape[:-2]:
        raise ValueError(
            f"{name}: batch dims {tuple(tensor.shape[:-2])} must equal query's "
            f"{tuple(query.shape[:-2])}; got {name}.shape = {shape_of(tensor)}, "
            f"query.shape = {shape_of(query)}"
        )


def check_same_dtype(name: str, tensor: Tensor, reference: Tensor, reference_name: str) -> None:
    if tensor.dtype != reference.dtype:
        raise ValueError(
            f"{name}: dtype {tensor.dtype} does not match {reference_name}'s {reference.dtype}"
        )


def check_mask(mask: Tensor, scores_shape: tuple[int, ...], layout: str) -> None:
    """A mask is boolean (True = attend) or floating (added), and broadcasts to the scores."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask: expected a tensor broadcastable to {layout}, got {type(mask)}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(
            f"mask: expected dtype torch.bool (True = attend) or a floating dtype (added to "
            f"the scores), got {mask.dtype}"
        )
    trailing = scores_shape[len(scores_shape) - mask.dim() :]
    fits = mask.dim() <= len(scores_shape) and all(
        size in (1, target) for size, target in zip(mask.shape, trailing, strict=True)
    )
    if not fits:
        raise ValueError(
            f"mask: shape {shape_of(mask)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} = {layout}; each dim must be 1 or match"
        )


def check_cached_attention_mask(
    mask: Tensor | None,
    is_causal: bool,
    cache: object,
    cache_type: type,
    new_scores_shape: tuple[int, int, int, int],
) -> None:
    """The mask and cache of a cached attention module, scores (B, H, T, new keys) before it.

    The cache must be a ``cache_type`` (or None), and the mask must cover the cached positions
    as well as the new ones: (B, H, T, len(cache) + new keys).
    """
    check_mask_or_causal(mask, is_causal)
    if cache is not None and not isinstance(cache, cache_type):
        raise ValueError(
            f"cache: expected an attnbook.{cache_type.__name__} or None, got {type(cache)}"
        )
    if mask is not None:
        batch, n_heads, query_len, new_len = new_scores_shape
        key_len = new_len + (0 if cache is None else len(cache))
        check_mask(mask, (batch, n_heads, query_len, key_len), "(B, H, T, S)")


def check_mask_or_causal(mask: Tensor | None, is_causal: bool) -> None:
    if mask is not None and is_causal:
        raise ValueError(
            "mask: got both a mask and is_causal=True; pass one (combine them yourself, e.g. "
            "causal_mask(T, S) & mask, if you need both)"
        )
