"""Where a token is: sinusoidal encodings, rotary embeddings (RoPE) and ALiBi biases.

Attention by itself ignores order, so a model adds positions somewhere:

- to the input, :func:`sinusoidal_encoding` (Vaswani et al., 2017), or a learned table;
- to queries and keys, :func:`apply_rope` (Su et al., 2021), rotating feature pairs by an
  angle proportional to the position, in one of two feature ``layout`` s;
- to the scores, :func:`alibi_bias` (Press et al., 2022), a per-head penalty growing linearly
  with the distance between query and key, usable as a float mask of the library's attention.

Angles are computed in float32 or wider: in 16 bits an angle of 1400 radians is off by several
radians.
"""

import math

import torch
from torch import Tensor

from attnbook.core._checks import (
    check_base,
    check_choice,
    check_even,
    check_float_dtype,
    check_floating,
    check_int,
    check_positions,
    check_tensor,
)

ROPE_LAYOUTS = ("adjacent", "halves")


def _angle_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)  # never rounded to 16 bits


def rope_angles(
    positions: Tensor, dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The rotation angles (T, dim / 2): position t turns feature pair i by t * base^(-2i/dim).

    Computed in ``dtype``, float32 or float64 (16 bits are refused: there an angle of 1400
    radians is off by several radians). float64 is not available on every device (MPS), hence
    the choice. ``base`` is a finite number > 1.
    """
    check_int("dim", dim)
    check_even("dim", dim, "rotary features come in pairs")
    check_positions(positions)
    check_base("base", base)
    check_float_dtype("dtype", dtype, wide=True)
    pair = torch.arange(dim // 2, device=positions.device, dtype=dtype)  # (dim/2,)
    frequencies = base ** (-2.0 * pair / dim)  # (dim/2,)
    return positions.to(dtype)[:, None] * frequencies[None, :]  # (T, dim/2)


def sinusoidal_encoding(
    positions: Tensor, dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The fixed encodings (T, dim) of Vaswani et al. (2017) at ``positions`` (T,).

    Feature 2i is sin(t * base^(-2i/dim)) and feature 2i + 1 is cos of the same angle, so each
    pair is a point on the unit circle turning at its own frequency: the first pair once every
    2 pi positions, the last almost not at all. Computed in float32 or wider and returned in
    ``dtype`` (any floating dtype).
    """
    check_float_dtype("dtype", dtype)
    angles = rope_angles(positions, dim, base, _angle_dtype(dtype))  # (T, dim/2)
    pairs = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, dim/2, 2)
    return pairs.flatten(-2).to(dtype)  # (T, dim): sin, cos interleaved


def rope_permutation(dim: int) -> Tensor:
    """The feature order (dim,) that turns the adjacent layout into the halves layout.

    ``x[..., rope_permutation(dim)]`` puts features 0, 2, 4, ... first and 1, 3, 5, ... second,
    so adjacent pair (2i, 2i + 1) becomes halves pair (i, i + dim/2). For any x,
    ``apply_rope(x, p, layout="adjacent")[..., perm]`` equals
    ``apply_rope(x[..., perm], p, layout="halves")``; ``perm.argsort()`` goes back.
    """
    check_int("dim", dim)
    check_even("dim", dim, "rotary features come in pairs")
    return torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])  # (dim,)


def apply_rope(
    x: Tensor, positions: Tensor, base: float = 10000.0, *, layout: str = "adjacent"
) -> Tensor:
    """Rotary position embedding (Su et al., 2021) of x (..., T, dim) at ``positions`` (T,).

    Pair i is rotated counter-clockwise by the angle ``positions[t] * base^(-2i/dim)``. Which
    features form pair i is the ``layout``: ``"adjacent"`` (2i, 2i + 1), as in RoFormer, GPT-J
    and DeepSeek; ``"halves"`` (i, i + dim/2), as in GPT-NeoX and Llama. Both are the same
    rotation up to :func:`rope_permutation`, but a checkpoint's projections were trained for
    one of them. Rotations keep lengths, and the dot product of a query rotated at position t
    with a key rotated at position s depends on the positions only through t - s.
    """
    check_tensor("x", x, "(..., T, dim)")
    check_floating("x", x)
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_positions(positions, x.size(-2), "x")
    check_base("base", base)
    angles = rope_angles(positions, x.size(-1), base, _angle_dtype(x.dtype))  # (T, dim/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, dim/2) each
    if layout == "adjacent":
        first, second = x[..., 0::2], x[..., 1::2]  # (..., T, dim/2) each
    else:
        first, second = x.chunk(2, dim=-1)  # (..., T, dim/2) each
    rotated = (first * cos - second * sin, first * sin + second * cos)  # (..., T, dim/2) each
    if layout == "adjacent":
        return torch.stack(rotated, dim=-1).flatten(-2)  # (..., T, dim): pairs interleaved
    return torch.cat(rotated, dim=-1)  # (..., T, dim): halves side by side


def alibi_slopes(n_heads: int) -> Tensor:
    """The ALiBi slope of each head (H,) float64, from Press et al. (2022) and their code.

    For a power of two n, a geometric sequence starting at 2^(-8/n) with that ratio: 8 heads
    get 1/2, 1/4, ..., 1/256. Otherwise, with n' the largest power of two below n: the n'
    slopes of n' heads, then every other slope of 2n' heads (1st, 3rd, ...) up to n in all.
    """
    check_int("n_heads", n_heads)
    power = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * (h + 1) / power) for h in range(power)]  # ratio 2^(-8/power)
    if power < n_heads:
        slopes += alibi_slopes(2 * power)[0::2][: n_heads - power].tolist()
    return torch.tensor(slopes, dtype=torch.float64)  # (H,)


def alibi_bias(
    n_heads: int,
    query_len: int,
    key_len: int | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The causal ALiBi bias (H, T, S) to add to the scores: a float mask, -inf in the future.

    Head h adds ``-slope_h * (i - j)`` to the score of the query at position i and the key at
    position j <= i, and -inf for j > i, so the bias alone is a causal mask (pass it as
    ``mask``, not together with ``is_causal``). As with a KV cache, the T queries are the last T
    of the S positions (bottom-right alignment): query t is at position S - T + t. ``key_len``
    defaults to ``query_len`` and must be at least it. ``dtype`` is a floating dtype (the bias
    holds -inf).
    """
    check_float_dtype("dtype", dtype)
    check_int("query_len", query_len)
    key_len = query_len if key_len is None else key_len
    check_int("key_len", key_len, low=query_len)
    slopes = alibi_slopes(n_heads).to(device=device, dtype=_angle_dtype(dtype))  # (H,)
    query_pos = torch.arange(key_len - query_len, key_len, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(key_len, device=device)[None, :]  # (1, S)
    distance = (query_pos - key_pos).to(slopes.dtype)  # (T, S): how far back each key is
    bias = -slopes[:, None, None] * distance  # (H, T, S)
    future = (key_pos > query_pos)[None]  # (1, T, S)
    return bias.masked_fill(future, float("-inf")).to(dtype)  # (H, T, S)
