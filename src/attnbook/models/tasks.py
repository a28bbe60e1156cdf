"""A synthetic translation task that trains on a CPU: write a word backwards.

Every output letter comes from exactly one input letter, so the right alignment is known in
advance (an anti-diagonal), and the input length can be chosen freely. Data comes from a
``torch.Generator``, so the same seed always gives the same batches and nothing is downloaded.
"""

import string
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnbook.core._checks import check_int, check_tensor
from attnbook.core.masks import padding_mask

PAD, BOS, EOS = 0, 1, 2
VOCAB = ("<pad>", "<s>", "</s>", *string.ascii_lowercase)
FIRST_LETTER = 3


@dataclass(frozen=True)
class Batch:
    """A padded batch of the reversal task.

    source (B, S): letter ids, ``PAD`` after each word's end; source_lengths (B,).
    target (B, S + 1): the same letters reversed, then ``EOS``, then ``PAD``;
    target_lengths (B,) = source_lengths + 1.
    """

    source: Tensor
    source_lengths: Tensor
    target: Tensor
    target_lengths: Tensor


def reverse_words(source: Tensor, source_lengths: Tensor) -> Tensor:
    """The target (B, S + 1) for source (B, S): each word reversed, then EOS, then PAD."""
    positions = torch.arange(source.size(1))[None, :]  # (1, S)
    mirrored = (source_lengths[:, None] - 1 - positions).clamp(min=0)  # (B, S)
    real = padding_mask(source_lengths, source.size(1))  # (B, S)
    reversed_letters = torch.where(real, source.gather(1, mirrored), PAD)  # (B, S)
    target = torch.cat([reversed_letters, torch.full_like(source[:, :1], PAD)], dim=1)
    return target.scatter(1, source_lengths[:, None], EOS)  # (B, S + 1)


def reversal_batch(
    batch_size: int,
    min_len: int,
    max_len: int,
    *,
    generator: torch.Generator,
    n_letters: int = 26,
) -> Batch:
    """``batch_size`` random words of ``min_len`` to ``max_len`` letters and their reversals.

    Letters are drawn uniformly from the first ``n_letters`` of a..z, lengths uniformly from
    [min_len, max_len], all from ``generator``. The batch is padded to S = the longest word.
    """
    check_int("batch_size", batch_size, 1)
    check_int("min_len", min_len, 1)
    check_int("max_len", max_len, min_len)
    check_int("n_letters", n_letters, 1, 26)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator: expected a torch.Generator, got {type(generator).__name__}")
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)  # (B,)
    longest = int(lengths.max())
    letters = torch.randint(
        FIRST_LETTER, FIRST_LETTER + n_letters, (batch_size, longest), generator=generator
    )  # (B, S)
    source = letters.masked_fill(~padding_mask(lengths, longest), PAD)  # (B, S)
    return Batch(source, lengths, reverse_words(source, lengths), lengths + 1)


def encode_words(words: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Words of letters a-z as a padded batch: source (B, S) and source_lengths (B,)."""
    if isinstance(words, str) or not words:
        raise ValueError(f"words: expected a non-empty list of words, got {words!r}")
    for word in words:
        if not isinstance(word, str) or not word or not set(word) <= set(string.ascii_lowercase):
            raise ValueError(f"words: expected non-empty words of letters a-z, got {word!r}")
    lengths = torch.tensor([len(word) for word in words])  # (B,)
    source = torch.full((len(words), int(lengths.max())), PAD)  # (B, S)
    for row, word in enumerate(words):
        source[row, : len(word)] = torch.tensor([VOCAB.index(letter) for letter in word])
    return source, lengths


def decode_ids(ids: Tensor) -> list[str]:
    """The tokens of one sequence of ids (S,), up to and including the first EOS, without PAD."""
    check_tensor("ids", ids, "(S,)", rank=1)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"ids: expected integer token ids, got dtype {ids.dtype}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= len(VOCAB)):
        raise ValueError(
            f"ids: expected token ids in [0, {len(VOCAB) - 1}], got values from "
            f"{ids.min().item()} to {ids.max().item()}"
        )
    tokens = []
    for token_id in ids.tolist():
        if token_id != PAD:
            tokens.append(VOCAB[token_id])
        if token_id == EOS:
            break
    return tokens
