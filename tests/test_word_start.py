"""word_start_weight: each head's mean weight on the current word's first letter, by hand."""

import pytest
import torch
from exercise_answers import start_of_word_weight

from attnbook.analysis.word_start import word_start_positions, word_start_weight
from attnbook.core.masks import causal_mask

SPACE, NEWLINE = 0, 1
SEPARATORS = [SPACE, NEWLINE]
# (B, T): a space at 2 and a line break at 6 / a space at 0 only / no separator
WINDOWS = torch.tensor(
    [[5, 6, 0, 7, 8, 9, 1, 5], [0, 5, 6, 7, 8, 9, 5, 6], [5, 6, 7, 8, 9, 5, 6, 7]]
)


def _random_weights(n_layers=2, n_heads=3, seed=0):
    """(L, B, H, T, T): causal softmax weights for WINDOWS."""
    n_batch, n_tokens = WINDOWS.shape
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(n_layers, n_batch, n_heads, n_tokens, n_tokens, generator=generator)
    return scores.masked_fill(~causal_mask(n_tokens), float("-inf")).softmax(dim=-1)


def _by_loop(weights, windows, skip_letters):
    """The definition written out: walk each window, track the latest word start."""
    total, count = weights.new_zeros(weights.size(0), weights.size(2)), 0
    for b, row in enumerate(windows.tolist()):
        start = None
        for t in range(len(row)):
            if t > 0 and row[t - 1] in SEPARATORS:
                start = t
            if start is not None and t - start >= skip_letters:
                total += weights[:, b, :, t, start]
                count += 1
    return total / count


def test_word_starts_are_the_latest_position_after_a_separator():
    starts = word_start_positions(WINDOWS, SEPARATORS)
    assert starts.tolist() == [
        [-1, -1, -1, 3, 3, 3, 3, 7],
        [-1, 1, 1, 1, 1, 1, 1, 1],
        [-1] * 8,
    ]


def test_a_word_after_a_line_break_starts_after_it():
    """A line's first word starts after the line break, not after the previous line's space."""
    # (1, T): a word, a space, a word, a line break, a word
    line = torch.tensor([[5, 0, 6, 7, 1, 8, 9, 5]])
    assert word_start_positions(line, SEPARATORS).tolist() == [[-1, -1, 2, 2, 2, 5, 5, 5]]
    # with the space alone the second line's letters would belong to the first line's word
    assert word_start_positions(line, [SPACE]).tolist() == [[-1, -1, 2, 2, 2, 2, 2, 2]]


@pytest.mark.parametrize("skip_letters", [0, 1, 2, 3])
def test_the_mean_is_the_loop_over_the_kept_queries(skip_letters):
    weights = _random_weights()
    found = word_start_weight(weights, WINDOWS, SEPARATORS, skip_letters=skip_letters)
    assert found.shape == (2, 3)
    torch.testing.assert_close(found, _by_loop(weights, WINDOWS, skip_letters))


def test_with_no_skip_it_is_exercise_3s_measure():
    weights = _random_weights(seed=1)
    torch.testing.assert_close(
        word_start_weight(weights, WINDOWS, SEPARATORS, skip_letters=0),
        start_of_word_weight(weights, WINDOWS, SEPARATORS),
    )


def test_skipping_two_letters_separates_a_previous_character_head_from_a_word_start_head():
    n_tokens = WINDOWS.size(1)
    previous = torch.zeros(n_tokens, n_tokens)  # (T, T): every query on the key before it
    previous[0, 0] = 1.0
    previous[torch.arange(1, n_tokens), torch.arange(n_tokens - 1)] = 1.0
    starts = word_start_positions(WINDOWS, SEPARATORS)  # (B, T)
    # (B, T, T): each query on its word start, or on itself when it has none
    word_start = torch.zeros(*WINDOWS.shape, n_tokens)
    keys = torch.where(starts >= 0, starts, torch.arange(n_tokens))
    word_start.scatter_(2, keys[..., None], 1.0)
    # (L, B, H, T, T) = (1, 3, 2, 8, 8): head 0 previous character, head 1 word start
    weights = torch.stack([previous.expand_as(word_start), word_start], dim=1)[None]
    every_query = word_start_weight(weights, WINDOWS, SEPARATORS, skip_letters=0)
    skipped = word_start_weight(weights, WINDOWS, SEPARATORS)
    # kept with no skip: queries 3-7 and 1-7 (12); the key before the query is the word start
    # at t = s + 1 only: t = 4 (s = 3) and t = 2 (s = 1)
    torch.testing.assert_close(every_query, torch.tensor([[2 / 12, 1.0]]))
    torch.testing.assert_close(skipped, torch.tensor([[0.0, 1.0]]))


def test_bad_inputs_are_refused_with_the_argument_named():
    weights = _random_weights()
    with pytest.raises(ValueError, match=r"weights: expected shape \(L, B, H, T, T\)"):
        word_start_weight(weights[0], WINDOWS, SEPARATORS)
    with pytest.raises(ValueError, match=r"weights: expected shape \(L, 2, H, 8, 8\)"):
        word_start_weight(weights, WINDOWS[:2], SEPARATORS)
    with pytest.raises(ValueError, match="skip_letters: expected an int >= 0, got -1"):
        word_start_weight(weights, WINDOWS, SEPARATORS, skip_letters=-1)
    with pytest.raises(ValueError, match="separator_ids: expected an int >= 0, got -1"):
        word_start_positions(WINDOWS, [SPACE, -1])
    with pytest.raises(ValueError, match="separator_ids: expected a list of token ids"):
        word_start_positions(WINDOWS, SPACE)
    with pytest.raises(ValueError, match="separator_ids: expected at least one token id"):
        word_start_positions(WINDOWS, [])
    with pytest.raises(ValueError, match="no query lies 9 or more letters after a word start"):
        word_start_weight(weights, WINDOWS, SEPARATORS, skip_letters=9)
