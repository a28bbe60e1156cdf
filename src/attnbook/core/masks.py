"""Boolean attention masks in PyTorch's SDPA convention: True = may attend, False = blocked."""

from collections.abc import Sequence

import torch
from torch import Tensor

from attnbook.core._checks import check_int

ALIGNMENTS = ("top-left", "bottom-right")
PADDING_SIDES = ("right", "left")


def causal_mask(
    query_len: int,
    key_len: int | None = None,
    *,
    align: str = "top-left",
    device: torch.device | str | None = None,
) -> Tensor:
    """The (T, S) mask that lets each query see only keys at or before its own position.

    ``align="top-left"`` (PyTorch's ``is_causal``): query i sees keys 0..i, so when T < S the
    last S - T keys are never seen. ``align="bottom-right"``: the T queries are the *last* T of
    the S positions, so query i sees keys 0..i + (S - T); this is what decoding with a KV cache
    needs. The two agree when T == S. ``key_len`` defaults to ``query_len``.
    """
    check_int("query_len", query_len)
    key_len = query_len if key_len is None else key_len
    check_int("key_len", key_len)
    if align not in ALIGNMENTS:
        raise ValueError(f"align: expected one of {ALIGNMENTS}, got {align!r}")
    offset = 0 if align == "top-left" else key_len - query_len
    query_pos = torch.arange(query_len, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(key_len, device=device)[None, :]  # (1, S)
    return key_pos <= query_pos + offset  # (T, S)


def causal_over_cache(
    mask: Tensor | None, is_causal: bool, query_len: int, key_len: int, device=None
) -> tuple[Tensor | None, bool]:
    """The ``(mask, is_causal)`` to attend with when T new queries follow cached positions.

    PyTorch's ``is_causal`` is top-left aligned, but after a cache the T queries are the last T
    of the S positions: a causal chunk with T != S needs ``causal_mask(T, S,
    align="bottom-right")`` instead. Anything else is returned unchanged.
    """
    if is_causal and query_len != key_len:
        return causal_mask(query_len, key_len, align="bottom-right", device=device), False
    return mask, is_causal


def padding_mask(
    lengths: Tensor | Sequence[int],
    max_len: int,
    *,
    side: str = "right",
    device: torch.device | str | None = None,
) -> Tensor:
    """The (B, S) mask that is True on each sequence's real tokens and False on its padding.

    ``lengths[b]`` real tokens sit at the start of row b (``side="right"``: padding after them)
    or at its end (``side="left"``). To use it as a key mask, add the broadcast dims:
    ``mask[:, None, :]`` against scores (B, T, S), ``mask[:, None, None, :]`` against
    (B, H, T, S).
    """
    check_int("max_len", max_len)
    if side not in PADDING_SIDES:
        raise ValueError(f"side: expected one of {PADDING_SIDES}, got {side!r}")
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths: expected a 1-D sequence of ints (B,), got shape {tuple(lengths.shape)} "
            f"and dtype {lengths.dtype}"
        )
    if len(lengths) and (lengths.min() < 0 or lengths.max() > max_len):
        raise ValueError(
            f"lengths: expected every length in [0, max_len = {max_len}], got {lengths.tolist()}"
        )
    positions = torch.arange(max_len, device=lengths.device)[None, :]  # (1, S)
    if side == "right":
        return positions < lengths[:, None]  # (B, S)
    return positions >= max_len - lengths[:, None]  # (B, S)


def sliding_window_mask(
    query_len: int,
    window: int,
    key_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """The (T, S) causal mask in which every query sees only its last ``window`` keys.

    The T queries are the *last* T of the S positions (bottom-right, as after a cache), so the
    query at absolute position p = i + (S - T) sees the keys j with p - window < j <= p:
    ``window`` counts the keys a query sees, itself included, so ``window=1`` is "only
    yourself" and ``window >= S`` (however large) is the plain causal mask. ``key_len`` defaults to
    ``query_len``. Mistral's and Gemma's local layers use this mask; stacked, L such layers let
    information travel about L * (window - 1) positions.
    """
    check_int("query_len", query_len)
    check_int("window", window)
    key_len = query_len if key_len is None else key_len
    check_int("key_len", key_len)
    if key_len < query_len:
        raise ValueError(
            f"key_len: the {query_len} queries are the last of the key positions, so key_len "
            f"must be >= query_len = {query_len}, got {key_len}"
        )
    window = min(window, key_len)  # a wider window sees no more keys, and fits in int64
    query_pos = torch.arange(key_len - query_len, key_len, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(key_len, device=device)[None, :]  # (1, S)
    return (key_pos <= query_pos) & (key_pos > query_pos - window)  # (T, S)
