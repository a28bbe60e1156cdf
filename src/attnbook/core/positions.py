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
    check_bool,
    check_choice,
    check_even,
    check_float_dtype,
    check_floating,
    check_int,
    check_positions,
    check_positive,
    check_tensor,
)

ROPE_LAYOUTS = ("adjacent", "halves")


def _angle_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)  # never rounded to 16 bits


ROPE_SCALING_TYPES = ("linear", "dynamic", "yarn", "llama3")
_SCALING_KEYS = {
    "linear": ({"factor"}, set()),
    "dynamic": ({"factor", "original_max_position_embeddings"}, set()),
    "yarn": (
        {"factor", "original_max_position_embeddings"},
        {"attention_factor", "beta_fast", "beta_slow", "truncate"},
    ),
    "llama3": (
        {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
        set(),
    ),
}


def check_rope_scaling(scaling: object, name: str = "scaling") -> None:
    """``scaling`` is None or a dict in transformers' ``rope_scaling`` spelling (see rope_angles).

    Every key must be one this library honours: a key it would silently ignore is refused.
    """
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise ValueError(f"{name}: expected None or a dict with a 'rope_type', got {scaling!r}")
    kind = scaling.get("rope_type")
    check_choice(f"{name}['rope_type']", kind, ROPE_SCALING_TYPES)
    required, optional = _SCALING_KEYS[kind]
    missing = sorted(required - scaling.keys())
    unknown = sorted(scaling.keys() - required - optional - {"rope_type"})
    if missing or unknown:
        raise ValueError(
            f"{name}: rope_type {kind!r} needs the keys {sorted(required)} and accepts "
            f"{sorted(optional)}; missing {missing}, not understood {unknown}"
        )
    _check_at_least_one(f"{name}['factor']", scaling["factor"])
    for key in ("low_freq_factor", "high_freq_factor", "attention_factor", "beta_fast"):
        if key in scaling:
            check_positive(f"{name}[{key!r}]", scaling[key])
    if "beta_slow" in scaling:
        check_positive(f"{name}['beta_slow']", scaling["beta_slow"])
    if "original_max_position_embeddings" in scaling:
        key = "original_max_position_embeddings"
        check_int(f"{name}[{key!r}]", scaling[key])
    if "truncate" in scaling:
        check_bool(f"{name}['truncate']", scaling["truncate"])
    if scaling.get("beta_fast", 32.0) <= scaling.get("beta_slow", 1.0):
        raise ValueError(
            f"{name}: beta_fast (default 32) must exceed beta_slow (default 1), got "
            f"{scaling.get('beta_fast', 32.0)!r} <= {scaling.get('beta_slow', 1.0)!r}"
        )
    if kind == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise ValueError(
            f"{name}: high_freq_factor must exceed low_freq_factor, got "
            f"{scaling['high_freq_factor']!r} <= {scaling['low_freq_factor']!r}"
        )


def _check_at_least_one(name: str, value: object) -> None:
    check_positive(name, value)
    if value < 1:
        raise ValueError(f"{name}: expected a finite number >= 1 (a stretch), got {value!r}")


def _yarn_frequencies(
    frequencies: Tensor, dim: int, base: float, scaling: dict
) -> tuple[Tensor, float]:
    """YaRN (Peng et al., 2023): interpolate the slow pairs, keep the fast ones, ramp between.

    Pair i turns ``original / wavelength_i`` times over the original context; pairs turning more
    than beta_fast (32) times keep their frequency, pairs turning fewer than beta_slow (1) times
    are divided by the factor, and a linear ramp over the pair index blends the ones between.
    The attention factor 0.1 ln(factor) + 1 (or the dict's ``attention_factor``) multiplies cos
    and sin, so the scores grow by its square.
    """
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    beta_fast, beta_slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)

    def pair_turning(turns: float) -> float:  # the (real) pair index that turns `turns` times
        return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if high == low else high
    pair = torch.arange(dim // 2, dtype=frequencies.dtype)  # (dim/2,)
    interpolated = ((pair - low) / (high - low)).clamp(0, 1)  # (dim/2,): 0 keep, 1 divide
    scaled = frequencies / factor * interpolated + frequencies * (1 - interpolated)  # (dim/2,)
    attention_factor = scaling.get("attention_factor", 0.1 * math.log(factor) + 1.0)
    return scaled, float(attention_factor)


def _llama3_frequencies(frequencies: Tensor, scaling: dict) -> Tensor:
    """Llama 3.1: wavelengths above original / low_freq_factor are stretched by the factor,
    those below original / high_freq_factor kept, and a smooth blend in between."""
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    turns = original * frequencies / (2 * math.pi)  # (dim/2,): turns over the original context
    smooth = ((turns - low) / (high - low)).clamp(0, 1)  # (dim/2,): 0 stretch, 1 keep
    return frequencies / factor * (1 - smooth) + frequencies * smooth  # (dim/2,)


def rope_frequencies(
    dim: int,
    base: float = 10000.0,
    *,
    scaling: dict | None = None,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, float]:
    """The frequencies (dim / 2,) of RoPE's feature pairs, and the factor that multiplies cos
    and sin: ``(base^(-2i/dim) for each pair i, 1.0)`` without ``scaling``.

    ``scaling`` stretches a trained context by ``factor``, in transformers' ``rope_scaling``
    spelling: ``{"rope_type": "linear", "factor": f}`` (position interpolation, Chen et al.,
    2023: every frequency divided by f); ``{"rope_type": "dynamic", "factor": f,
    "original_max_position_embeddings": n}`` (dynamic NTK-aware scaling: the base grows to
    base * (f * L / n - f + 1)^(dim / (dim - 2)) once the sequence length L = ``seq_len``
    passes n, and is unchanged before); ``{"rope_type": "yarn", ...}`` (YaRN, see
    ``_yarn_frequencies``; optional ``attention_factor``, ``beta_fast``, ``beta_slow``,
    ``truncate``); ``{"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings"}`` (Llama 3.1). Only YaRN returns a factor other than 1.
    """
    check_int("dim", dim)
    check_even("dim", dim, "rotary features come in pairs")
    check_base("base", base)
    check_float_dtype("dtype", dtype, wide=True)
    check_rope_scaling(scaling)
    kind = None if scaling is None else scaling["rope_type"]
    if kind == "dynamic":
        check_int("seq_len", seq_len)
        original = scaling["original_max_position_embeddings"]
        stretch = scaling["factor"] * max(seq_len, original) / original - scaling["factor"] + 1
        base = base * stretch ** (dim / (dim - 2))
    pair = torch.arange(dim // 2, dtype=dtype)  # (dim/2,)
    frequencies = base ** (-2.0 * pair / dim)  # (dim/2,)
    if kind == "linear":
        return frequencies / scaling["factor"], 1.0
    if kind == "yarn":
        return _yarn_frequencies(frequencies, dim, base, scaling)
    if kind == "llama3":
        return _llama3_frequencies(frequencies, scaling), 1.0
    return frequencies, 1.0


def rope_angles(
    positions: Tensor,
    dim: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    *,
    scaling: dict | None = None,
) -> Tensor:
    """The rotation angles (T, dim / 2): position t turns feature pair i by t * base^(-2i/dim).

    Computed in ``dtype``, float32 or float64 (16 bits are refused: there an angle of 1400
    radians is off by several radians). float64 is not available on every device (MPS), hence
    the choice. ``base`` is a finite number > 1. ``scaling`` changes the frequencies as in
    :func:`rope_frequencies` (dynamic scaling reads the sequence length as the largest
    position + 1); YaRN's attention factor is not an angle: :func:`apply_rope` applies it.
    """
    check_int("dim", dim)
    check_even("dim", dim, "rotary features come in pairs")
    check_positions(positions)
    frequencies, _ = rope_frequencies(
        dim, base, scaling=scaling, seq_len=_sequence_length(positions), dtype=dtype
    )  # (dim/2,)
    frequencies = frequencies.to(positions.device)  # (dim/2,)
    return positions.to(dtype)[:, None] * frequencies[None, :]  # (T, dim/2)


def _sequence_length(positions: Tensor) -> int:
    """The length a sequence must have to hold these positions (dynamic scaling reads it)."""
    return int(positions.max().item()) + 1 if positions.numel() else 1


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
    x: Tensor,
    positions: Tensor,
    base: float = 10000.0,
    *,
    layout: str = "adjacent",
    scaling: dict | None = None,
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
    check_rope_scaling(scaling)
    dim, dtype = x.size(-1), _angle_dtype(x.dtype)
    angles = rope_angles(positions, dim, base, dtype, scaling=scaling)  # (T, dim/2)
    _, factor = rope_frequencies(dim, base, scaling=scaling, seq_len=_sequence_length(positions))
    cos = (angles.cos() * factor).to(x.dtype)  # (T, dim/2)
    sin = (angles.sin() * factor).to(x.dtype)  # (T, dim/2)
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
