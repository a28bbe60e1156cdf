"""Input checks shared by the attention functions and modules.

Every check raises ``ValueError`` before any arithmetic, naming the argument, what it got and
what it expected, so a reader sees the mistake rather than a broadcasting error deep inside.
"""

import math
import numbers

import torch
from torch import Tensor

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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


def check_bool(name: str, value: object) -> None:
    """``value`` is True or False (not 0/1, not a string): a switch."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")


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


def check_model_input(
    name: str, tensor: object, layout: str, width: int, width_name: str = "D = d_model"
) -> None:
    """``tensor`` is a 3-dim (B, length, width) input; ``width_name`` names the last dim.

    The message reads e.g. "with D = d_model = 16" or, for ``width_name="key_dim"``, "with
    key_dim = 48".
    """
    check_tensor(name, tensor, layout, rank=3)
    if tensor.size(-1) != width:
        raise ValueError(
            f"{name}: expected shape {layout} with {width_name} = {width}, "
            f"got {name}.shape = {shape_of(tensor)}"
        )


def check_floating(name: str, tensor: Tensor) -> None:
    """Attention works on real numbers: integer, bool and complex tensors are refused."""
    if not tensor.dtype.is_floating_point:
        raise ValueError(
            f"{name}: expected a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {tensor.dtype}; convert it with {name}.float()"
        )


def check_feature_width(name: str, tensor: Tensor) -> None:
    """A query needs at least one feature: with d = 0 there is nothing to score (1 / sqrt(0))."""
    if tensor.size(-1) == 0:
        raise ValueError(
            f"{name}: expected at least one feature in the last dim, got "
            f"{name}.shape = {shape_of(tensor)}"
        )


def check_scale(scale: object) -> None:
    """A score scale is None (the default 1 / sqrt(d)) or a finite real number."""
    if scale is None:
        return
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise ValueError(f"scale: expected a finite number or None, got {scale!r}")


def broadcast_shape(*shapes: tuple[int, ...]) -> torch.Size | None:
    """The shape ``shapes`` broadcast to, as in PyTorch (sizes 1 or equal), or None if none.

    Written out rather than ``torch.broadcast_shapes``, whose first call imports sympy
    (about 2 s of CPU, paid by every chapter that calls attention).
    """
    rank = max(len(shape) for shape in shapes)
    broadcast = []
    for axis in range(-rank, 0):  # right-aligned, as PyTorch lines shapes up
        sizes = {shape[axis] for shape in shapes if len(shape) >= -axis} - {1}
        if len(sizes) > 1:
            return None
        broadcast.append(sizes.pop() if sizes else 1)
    return torch.Size(broadcast)


def check_broadcastable_batch_dims(names: tuple[str, ...], tensors: tuple[Tensor, ...]) -> None:
    """The batch dims ``...`` of (..., length, width) tensors broadcast together, as in PyTorch."""
    if broadcast_shape(*(tensor.shape[:-2] for tensor in tensors)) is None:
        shapes = ", ".join(
            f"{name}.shape = {shape_of(tensor)}"
            for name, tensor in zip(names, tensors, strict=True)
        )
        raise ValueError(
            f"{names[-1]}: the batch dims (all but the last two) must broadcast together, as "
            f"in PyTorch (each 1 or equal); got {shapes}"
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


def check_mask(mask: object, scores_shape: tuple[int, ...], layout: str) -> None:
    """A mask is boolean (True = attend) or floating (added), and broadcasts to the scores.

    Integer masks are refused everywhere: 0/1 could mean "attend" or "add 1 to the score".
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask: expected a tensor broadcastable to {layout}, got {type(mask)}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(
            f"mask: expected dtype torch.bool (True = attend) or a floating dtype (added to "
            f"the scores), got {mask.dtype}; for 0/1 masks use mask.bool()"
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


def check_head_mask(head_mask: object, batch: int, n_heads: int, dtype: torch.dtype) -> None:
    """A head gate is a floating (H,) or (B, H) tensor, one factor per head (and batch item)."""
    if head_mask is None:
        return
    if not isinstance(head_mask, Tensor):
        raise ValueError(
            f"head_mask: expected a tensor of shape (H,) or (B, H), got {type(head_mask).__name__}"
        )
    if head_mask.dtype != dtype:
        raise ValueError(
            f"head_mask: expected dtype {dtype} as the inputs (one float factor per head), got "
            f"{head_mask.dtype}"
        )
    if head_mask.shape not in ((n_heads,), (batch, n_heads)):
        raise ValueError(
            f"head_mask: expected shape (H,) = ({n_heads},) or (B, H) = ({batch}, {n_heads}), "
            f"got head_mask.shape = {shape_of(head_mask)}"
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


def check_attention_inputs(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    scale: float | None = None,
) -> None:
    """Raise ``ValueError`` unless query (..., T, d), key (..., S, d), value (..., S, d_v), the
    mask and the scale fit together.

    The batch dims ``...`` broadcast together as in ``F.scaled_dot_product_attention``.
    """
    names = ("query", "key", "value")
    layouts = ("(..., T, d)", "(..., S, d)", "(..., S, d_v)")
    tensors = (query, key, value)
    for name, tensor, layout in zip(names, tensors, layouts, strict=True):
        check_tensor(name, tensor, layout)
        check_floating(name, tensor)
    for name, tensor in (("key", key), ("value", value)):
        check_same_dtype(name, tensor, query, "query")
    check_broadcastable_batch_dims(names, tensors)
    check_feature_width("query", query)
    if key.size(-1) != query.size(-1):
        raise ValueError(
            f"key: expected shape (..., S, d) with d = {query.size(-1)} as in query, got "
            f"key.shape = {shape_of(key)}"
        )
    if value.size(-2) != key.size(-2):
        raise ValueError(
            f"value: expected shape (..., S, d_v) with S = {key.size(-2)} as in key, got "
            f"value.shape = {shape_of(value)}"
        )
    check_scale(scale)
    check_mask_or_causal(mask, is_causal)
    if mask is not None:
        batch_shape = broadcast_shape(query.shape[:-2], key.shape[:-2])
        scores_shape = (*batch_shape, query.size(-2), key.size(-2))
        check_mask(mask, scores_shape, "(..., T, S)")


def check_query_key(query: Tensor, key: Tensor, query_dim: int | None, key_dim: int | None) -> None:
    """query (..., T, d_q) and key (..., S, d_k) with equal batch dims and the expected widths."""
    check_tensor("query", query, "(..., T, d_q)")
    check_tensor("key", key, "(..., S, d_k)", rank=query.dim())
    check_floating("query", query)
    check_feature_width("query", query)
    check_same_batch_dims("key", key, query)
    check_same_dtype("key", key, query, "query")
    for name, tensor, width in (("query", query, query_dim), ("key", key, key_dim)):
        if width is not None and tensor.size(-1) != width:
            raise ValueError(
                f"{name}: expected last dim {width}, got {name}.shape = {shape_of(tensor)}"
            )


def check_head_counts(d_model: int, n_heads: int, n_kv_heads: int) -> None:
    """d_model splits into n_heads heads, and n_kv_heads key/value heads serve equal groups."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        check_int(name, value)
    if d_model % n_heads:
        raise ValueError(
            f"d_model: {d_model} is not divisible by n_heads = {n_heads}; each head needs "
            f"d_head = d_model / n_heads dims"
        )
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_kv_heads: n_heads = {n_heads} is not divisible by n_kv_heads = {n_kv_heads}; "
            f"each key/value head must serve the same number of query heads"
        )


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """``value`` is one of the named ``choices`` (a layout, a scheme, ...)."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


def check_even(name: str, value: int, reason: str) -> None:
    """``value`` is even; ``reason`` says why, e.g. "rotary features come in pairs"."""
    if value % 2:
        raise ValueError(f"{name}: {reason}, so {name} must be even, got {value}")


def check_positions(positions: object, length: int | None = None, other: str = "x") -> None:
    """Positions are a (T,) tensor of integer or float numbers, T = ``length`` when given."""
    if not isinstance(positions, Tensor):
        raise ValueError(
            f"positions: expected a tensor of shape (T,), got {type(positions).__name__}; "
            f"use torch.arange(T) or torch.tensor(positions)"
        )
    if positions.dtype == torch.bool or positions.dtype.is_complex:
        raise ValueError(
            f"positions: expected integer (or real) positions, got dtype {positions.dtype}"
        )
    if length is None and positions.dim() != 1:
        raise ValueError(f"positions: expected shape (T,), got {shape_of(positions)}")
    if length is not None and (positions.dim() != 1 or positions.size(0) != length):
        raise ValueError(
            f"positions: expected shape (T,) with T = {length} as in {other}, got "
            f"positions.shape = {shape_of(positions)}"
        )
    if positions.dtype.is_floating_point and not torch.isfinite(positions).all():
        raise ValueError(
            f"positions: expected finite positions, got {positions[~torch.isfinite(positions)][0]}"
        )


def check_positive(name: str, value: object) -> None:
    """``value`` is a finite real number above 0 (a base, a scale)."""
    bad_type = isinstance(value, bool) or not isinstance(value, int | float)
    if bad_type or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


def _is_finite_float(value: numbers.Real) -> bool:
    """A real number that is finite as a float (an int beyond 1.8e308 is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_base(name: str, value: object) -> None:
    """A frequency base (of RoPE or sinusoidal encodings) is a finite real number above 1.

    The frequencies base^(-2i/dim) then fall from 1 towards 0 over the feature pairs; a base of
    1 or less gives equal or rising ones, a negative base NaN, an infinite one zero frequencies.
    """
    bad_type = isinstance(value, bool) or not isinstance(value, numbers.Real)
    if bad_type or not _is_finite_float(value) or value <= 1:
        raise ValueError(
            f"{name}: expected a finite number > 1 (frequencies base^(-2i/dim) fall from 1), "
            f"got {value!r}"
        )


def check_float_dtype(name: str, dtype: object, wide: bool = False) -> None:
    """``dtype`` is a real floating torch dtype: float16, bfloat16, float32 or float64.

    With ``wide``, only float32 and float64: what must not be computed in 16 bits (angles).
    """
    if wide and dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"{name}: expected torch.float32 or torch.float64 (in 16 bits angles are radians "
            f"off), got {dtype!r}"
        )
    if dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{name}: expected a floating dtype (torch.float16, torch.bfloat16, torch.float32 or "
            f"torch.float64), got {dtype!r}"
        )
