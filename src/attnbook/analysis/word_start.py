"""How much weight each head puts on the first letter of the current word.

In a character-level model a **start-of-word head** looks back from a letter to the first
letter of its word: key ``s``, the latest position with ``1 <= s <= t`` that follows a space.
Measured on every query, a previous-character head scores too, because for a query on a word's
first or second letter the word's start is the query itself or the character just before it.
:func:`word_start_weight` can leave those queries out (``skip_letters=2``, the default), so
that only a head that reaches further back to the word's start scores above uniform attention.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_int, check_tensor, shape_of


def word_start_positions(windows: Tensor, space_id: int) -> Tensor:
    """(B, T): for every query t, its current word's first letter s, or -1 before any space.

    ``s`` is the largest position with ``1 <= s <= t`` and ``windows[b, s - 1] == space_id``.
    """
    check_tensor("windows", windows, "(B, T)", rank=2)
    check_int("space_id", space_id, low=0)
    n_tokens = windows.size(1)
    positions = torch.arange(n_tokens, device=windows.device).expand_as(windows)  # (B, T)
    after_space = torch.zeros_like(windows, dtype=torch.bool)  # (B, T)
    after_space[:, 1:] = windows[:, :-1] == space_id
    # (B, T): the latest word start at or before each query, -1 where there is none yet
    return torch.where(after_space, positions, -1).cummax(dim=1).values


def word_start_weight(
    weights: Tensor, windows: Tensor, space_id: int, *, skip_letters: int = 2
) -> Tensor:
    """(L, H): each head's mean weight on the first letter of the query's current word.

    ``weights`` (L, B, H, T, T) are causal attention weights on the windows ``windows`` (B, T).
    The mean is over every (b, t) whose query has a word start s (see
    :func:`word_start_positions`) and lies at least ``skip_letters`` letters after it
    (``t - s >= skip_letters``); ``skip_letters=0`` keeps every query with a word start.
    """
    check_tensor("weights", weights, "(L, B, H, T, T)", rank=5)
    check_tensor("windows", windows, "(B, T)", rank=2)
    check_int("skip_letters", skip_letters, low=0)
    n_batch, n_tokens = windows.shape
    expected = (n_batch, n_tokens, n_tokens)
    if (weights.size(1), weights.size(3), weights.size(4)) != expected:
        raise ValueError(
            f"weights: expected shape (L, {n_batch}, H, {n_tokens}, {n_tokens}) to match "
            f"windows {shape_of(windows)}, got weights.shape = {shape_of(weights)}"
        )
    starts = word_start_positions(windows, space_id)  # (B, T)
    queries = torch.arange(n_tokens, device=windows.device)  # (T,)
    kept = (starts >= 0) & (queries - starts >= skip_letters)  # (B, T)
    if not kept.any():
        raise ValueError(
            f"windows: no query lies {skip_letters} or more letters after a word start "
            f"(space_id={space_id}), so there is nothing to average"
        )
    batch_index, query_index = kept.nonzero(as_tuple=True)  # (N,) each
    key_index = starts[batch_index, query_index]  # (N,)
    # (N, L, H): the weight each kept query puts on its word start (index arrays split by a
    # slice put their dimension first)
    picked = weights[:, batch_index, :, query_index, key_index]
    return picked.mean(dim=0)  # (L, H)
