"""The shipped Genesis text, the character vocabulary, the split and the batches."""

import re

import pytest
import torch

from attnbook import (
    CharVocabulary,
    load_genesis,
    random_batch,
    sequential_batches,
    train_validation_split,
)


def test_the_shipped_text_is_genesis_one_verse_a_line():
    text = load_genesis()
    lines = text.splitlines()
    assert len(lines) == 1533 and text.endswith("\n")
    assert lines[0] == "In the beginning God created the heaven and the earth."
    assert lines[-1].startswith("So Joseph died")
    assert text.isascii() and 100_000 < len(text) < 400_000


def test_vocabulary_round_trip_and_order():
    vocab = CharVocabulary("banana band")
    assert vocab.characters == [" ", "a", "b", "d", "n"] and len(vocab) == 5
    ids = vocab.encode("band")
    assert ids.dtype == torch.long and ids.tolist() == [2, 1, 4, 3]
    assert vocab.decode(ids) == "band" and vocab.decode([4, 1]) == "na"
    assert repr(vocab) == "CharVocabulary(5 characters)"


def test_vocabulary_errors():
    vocab = CharVocabulary("abc")
    with pytest.raises(ValueError, match=re.escape("characters not in the vocabulary: ['z']")):
        vocab.encode("abz")
    with pytest.raises(ValueError, match=re.escape("expected ids in [0, 3), got [3]")):
        vocab.decode([0, 3])
    with pytest.raises(ValueError, match="non-empty string"):
        CharVocabulary("")


def test_split_is_contiguous():
    ids = torch.arange(100)
    train, validation = train_validation_split(ids, 0.1)
    assert torch.equal(train, torch.arange(90)) and torch.equal(validation, torch.arange(90, 100))
    with pytest.raises(ValueError, match="leaves one part empty"):
        train_validation_split(ids, 0.001)


def test_random_batch_targets_are_shifted_and_seeded():
    ids = torch.arange(50)
    inputs, targets = random_batch(ids, 4, 8, torch.Generator().manual_seed(3))
    assert inputs.shape == targets.shape == (4, 8)
    assert torch.equal(targets, inputs + 1)  # consecutive ids: the next one is id + 1
    assert int(targets.max()) <= 49
    again, _ = random_batch(ids, 4, 8, torch.Generator().manual_seed(3))
    assert torch.equal(inputs, again)
    state = torch.random.get_rng_state()
    random_batch(ids, 4, 8, torch.Generator().manual_seed(3))
    assert torch.equal(state, torch.random.get_rng_state())  # the global state is untouched
    with pytest.raises(ValueError, match=re.escape("need at least block_size + 1 = 9 ids")):
        random_batch(torch.arange(8), 1, 8, torch.Generator())


def test_sequential_batches_tile_the_ids():
    inputs, targets = sequential_batches(torch.arange(20), 6)
    assert inputs.tolist() == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17]]
    assert torch.equal(targets, inputs + 1)
    assert sequential_batches(torch.arange(20), 6, max_blocks=2)[0].shape == (2, 6)
    with pytest.raises(ValueError, match="need at least block_size"):
        sequential_batches(torch.arange(6), 6)
