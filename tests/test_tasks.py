"""The reversal task: correct targets, reproducible from a seed, bad input rejected."""

import torch
from helpers import raises

from attnbook import decode_ids, encode_words, reversal_batch
from attnbook.models.tasks import EOS, PAD, VOCAB


def batch_from(seed, batch_size=8, min_len=3, max_len=9):
    generator = torch.Generator().manual_seed(seed)
    return reversal_batch(batch_size, min_len, max_len, generator=generator)


def test_targets_are_the_words_reversed_then_eos():
    batch = batch_from(0)
    for row in range(8):
        length = int(batch.source_lengths[row])
        word = decode_ids(batch.source[row])
        assert len(word) == length and batch.target_lengths[row] == length + 1
        assert decode_ids(batch.target[row]) == word[::-1] + ["</s>"]


def test_padding_sits_after_each_word():
    batch = batch_from(1)
    assert batch.source.shape == (8, int(batch.source_lengths.max()))
    assert batch.target.shape == (8, batch.source.size(1) + 1)
    for row in range(8):
        length = int(batch.source_lengths[row])
        assert (batch.source[row, length:] == PAD).all()
        assert (batch.source[row, :length] > EOS).all()
        assert batch.target[row, length] == EOS and (batch.target[row, length + 1 :] == PAD).all()


def test_lengths_and_letters_stay_in_range():
    batch = reversal_batch(200, 4, 6, generator=torch.Generator().manual_seed(0), n_letters=3)
    assert batch.source_lengths.min() == 4 and batch.source_lengths.max() == 6
    letters = batch.source[batch.source != PAD]
    assert set(letters.tolist()) == {VOCAB.index(c) for c in "abc"}


def test_same_seed_same_data_different_seed_different_data():
    first, again, other = batch_from(7), batch_from(7), batch_from(8)
    assert torch.equal(first.source, again.source) and torch.equal(first.target, again.target)
    assert not (
        first.source.shape == other.source.shape and torch.equal(first.source, other.source)
    )


def test_encode_then_decode_round_trips_with_padding():
    source, lengths = encode_words(["attention", "ox"])
    assert source.shape == (2, 9) and lengths.tolist() == [9, 2]
    assert "".join(decode_ids(source[1])) == "ox" and (source[1, 2:] == PAD).all()


def test_bad_batch_size():
    with raises("batch_size: expected a positive int, got 0"):
        reversal_batch(0, 3, 5, generator=torch.Generator())


def test_bad_min_len():
    with raises("min_len: expected a positive int, got 0"):
        reversal_batch(4, 0, 5, generator=torch.Generator())


def test_max_len_below_min_len():
    with raises("max_len: expected an int >= 5, got 3"):
        reversal_batch(4, 5, 3, generator=torch.Generator())


def test_bad_n_letters():
    with raises("n_letters: expected an int in [1, 26], got 27"):
        reversal_batch(4, 3, 5, generator=torch.Generator(), n_letters=27)


def test_generator_must_be_a_generator():
    with raises("generator: expected a torch.Generator, got int"):
        reversal_batch(4, 3, 5, generator=0)


def test_words_must_be_a_list():
    with raises("words: expected a non-empty list of words, got 'cat'"):
        encode_words("cat")


def test_words_must_be_lowercase_letters():
    with raises("words: expected non-empty words of letters a-z, got 'Cat'"):
        encode_words(["dog", "Cat"])


def test_decode_needs_one_sequence():
    with raises("ids: expected shape (S,) (1 dims), got ids.shape = (2, 3)"):
        decode_ids(torch.zeros(2, 3, dtype=torch.long))
