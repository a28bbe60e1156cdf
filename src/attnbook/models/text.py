"""A small text corpus and the character-level pieces a language model trains on.

:func:`load_genesis` reads the Book of Genesis (King James Version) shipped in the repository
(``data/genesis_kjv.txt``, made by ``scripts/make_genesis_text.py`` and installed with the
package as ``attnbook.data``). :class:`CharVocabulary`
maps characters to token ids and back, :func:`train_validation_split` cuts the ids in two
contiguous parts, and :func:`random_batch` draws (inputs, targets) windows from a seeded
``torch.Generator``: the targets are the inputs shifted by one character.
"""

from importlib.resources import files

import torch
from torch import Tensor

from attnbook.core._checks import check_int, check_probability, check_tensor, shape_of

DATA = files("attnbook.data")  # the repository's data/, installed as package data


def load_genesis() -> str:
    """The Book of Genesis, KJV, one verse a line (about 197,000 ASCII characters)."""
    path = DATA / "genesis_kjv.txt"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; regenerate it with scripts/make_genesis_text.py"
        )
    return path.read_text(encoding="ascii")


class CharVocabulary:
    """One token per distinct character of a text, numbered in sorted character order.

    ``encode(text)`` -> token ids (N,) as int64; ``decode(ids)`` -> text; ``len(vocab)`` is the
    vocabulary size V; ``characters`` lists them, id i being ``characters[i]``.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError("text: expected a non-empty string to build the vocabulary from")
        self.characters = sorted(set(text))
        self._ids = {character: index for index, character in enumerate(self.characters)}

    def __len__(self) -> int:
        return len(self.characters)

    def __repr__(self) -> str:
        return f"CharVocabulary({len(self)} characters)"

    def encode(self, text: str) -> Tensor:
        """Token ids (N,) of the N characters of ``text``."""
        unknown = sorted(set(text) - self._ids.keys())
        if unknown:
            raise ValueError(f"text: characters not in the vocabulary: {unknown[:10]!r}")
        return torch.tensor([self._ids[character] for character in text], dtype=torch.long)

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of token ids (N,) (a 1-D tensor or a list of ints)."""
        if torch.is_tensor(ids):
            check_tensor("ids", ids, "(N,)", rank=1)
            ids = ids.tolist()
        bad = [i for i in ids if not 0 <= i < len(self)]
        if bad:
            raise ValueError(f"ids: expected ids in [0, {len(self)}), got {bad[:10]}")
        return "".join(self.characters[i] for i in ids)


def train_validation_split(ids: Tensor, validation_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """Split ids (N,) into a first part for training and the last part for validation.

    The split is contiguous, not shuffled, so no validation window overlaps a training one.
    """
    check_tensor("ids", ids, "(N,)", rank=1)
    check_probability("validation_fraction", validation_fraction)
    n_validation = round(ids.numel() * validation_fraction)
    if not 0 < n_validation < ids.numel():
        raise ValueError(
            f"validation_fraction: {validation_fraction} of {ids.numel()} ids leaves one part empty"
        )
    return ids[:-n_validation], ids[-n_validation:]  # (N - N_val,), (N_val,)


def random_batch(
    ids: Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """B windows of T = ``block_size`` ids at random offsets, and the ids that follow each.

    Returns (inputs (B, T), targets (B, T)) with ``targets[b, t] == ids[start_b + t + 1]``: the
    character after ``inputs[b, t]``. The offsets come from ``generator`` alone.
    """
    check_tensor("ids", ids, "(N,)", rank=1)
    if not isinstance(generator, torch.Generator):
        raise ValueError(
            f"generator: expected a torch.Generator (the offsets come from it alone), got "
            f"{type(generator).__name__}; pass torch.Generator().manual_seed(seed)"
        )
    check_int("batch_size", batch_size)
    check_int("block_size", block_size)
    if ids.numel() < block_size + 1:
        raise ValueError(
            f"ids: need at least block_size + 1 = {block_size + 1} ids, got ids.shape = "
            f"{shape_of(ids)}"
        )
    starts = torch.randint(0, ids.numel() - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = starts[:, None] + torch.arange(block_size)  # (B, T)
    return ids[offsets], ids[offsets + 1]  # (B, T), (B, T)


def sequential_batches(
    ids: Tensor, block_size: int, max_blocks: int | None = None
) -> tuple[Tensor, Tensor]:
    """The ids cut into consecutive, non-overlapping windows: (inputs (N_b, T), targets (N_b, T)).

    Deterministic, so a validation loss computed on them is the same every time; at most
    ``max_blocks`` windows, from the start.
    """
    check_tensor("ids", ids, "(N,)", rank=1)
    check_int("block_size", block_size)
    n_blocks = (ids.numel() - 1) // block_size
    if max_blocks is not None:
        check_int("max_blocks", max_blocks)
        n_blocks = min(n_blocks, max_blocks)
    if n_blocks == 0:
        raise ValueError(
            f"ids: need at least block_size + 1 = {block_size + 1} ids, got ids.shape = "
            f"{shape_of(ids)}"
        )
    used = n_blocks * block_size
    return ids[:used].view(n_blocks, block_size), ids[1 : used + 1].view(n_blocks, block_size)
