"""How much weight each head puts on the first letter of the current word.

In a character-level model a **start-of-word head** looks back from a letter to the first
letter of its word: key ``s``, the latest position with ``1 <= s <= t`` that follows a
**separator**, a character that ends a word and is not part of the next one. Which ids
separate is the caller's choice (``separator_ids``); chapter 12 passes the space and the line
break: in its Genesis text a letter follows some other non-letter only inside a word (the
apostrophe of "'s") or after an opening parenthesis (6 times), which then counts as its
word's first character.

Measured on every query, a previous-character head scores too, because for a query on a word's
first or second letter the word's start is the query itself or the character just before it.
:func:`word_start_weight` can leave those queries out (``skip_letters=2``, the default), so
that only a head that reaches further back to the word's start scores above uniform attention.
"""

from collections.abc import Sequence

import torch
from torch import Tensor

from attnbook.core._checks import check_int, check_tensor, shape_of


def _separator_tensor(separator_ids: Sequence[int], device: torch.device) -> Tensor:
    """(K,): the separator ids, checked: a non-empty sequence of ints >= 0."""
    if isinstance(separator_ids, (str, bytes, Tensor)) or not isinstance(separator_ids, Sequence):
        raise ValueError(
            f"separator_ids: expected a list of token ids (ints >= 0), got {separator_ids!r}"
        )
    if not separator_ids:
        raise ValueError("separator_ids: expected at least one token id, got an empty list")
    for separator in separator_ids:
        check_int("separator_ids", separator, low=0)
    return torch.tensor(list(separator_ids), device=device)


def word_start_positions(windows: Tensor, separator_ids: Sequence[int]) -> Tensor:
    """(B, T): for every query t, its current word's first letter s, or -1 before any separator.

    ``s`` is the largest position with ``1 <= s <= t`` and ``windows[b, s - 1]`` one of
    ``separator_ids`` (for example the ids of the space and the line break).
    """
    check_tensor("windows", windows, "(B, T)", rank=2)
    separators = _separator_tensor(separator_ids, windows.device)  # (K,)
    n_tokens = windows.size(1)
    positions = torch.arange(n_tokens, device=windows.device).expand_as(windows)  # (B, T)
    after_separator = torch.zeros_like(windows, dtype=torch.bool)  # (B, T)
    after_separator[:, 1:] = torch.isin(windows[:, :-1], separators)
    # (B, T): the latest word start at or before each query, -1 where there is none yet
    return torch.where(after_separator, positions, -1).cummax(dim=1).values


def word_start_weight(
    weights: Tensor, windows: Tensor, separator_ids: Sequence[int], *, skip_letters: int = 2
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
    starts = word_start_positions(windows, separator_ids)  # (B, T)
    queries = torch.arange(n_tokens, device=windows.device)  # (T,)
    kept = (starts >= 0) & (queries - starts >= skip_letters)  # (B, T)
    if not kept.any():
        raise ValueError(
            f"windows: no query lies {skip_letters} or more letters after a word start "
            f"(separator_ids={list(separator_ids)}), so there is nothing to average"
        )
    batch_index, query_index = kept.nonzero(as_tuple=True)  # (N,) each
    key_index = starts[batch_index, query_index]  # (N,)
    # (N, L, H): the weight each kept query puts on its word start (index arrays split by a
    # slice put their dimension first)
    picked = weights[:, batch_index, :, query_index, key_index]
    return picked.mean(dim=0)  # (L, H)
