"""Chapter 19's checkers accept the reference solutions and explain three typical mistakes each."""

import re

import pytest
import torch

from attnbook import exercises
from attnbook.exercises import ExerciseError


def expect_message(checker, fn, fragment):
    with pytest.raises(ExerciseError, match=re.escape(fragment)):
        checker(fn)


def moba_choice(q, k, block_size, top_k, *, own=True, causal=True, extra=0):
    T = q.size(0)
    n_blocks = -(-T // block_size)
    means = torch.stack([k[j * block_size : (j + 1) * block_size].mean(0) for j in range(n_blocks)])
    scores = q @ means.T  # (T, n_blocks)
    own_block = torch.arange(T) // block_size  # (T,)
    blocks = torch.arange(n_blocks)
    scores = scores.masked_fill(blocks > own_block[:, None], float("-inf"))
    if own:
        scores = scores.masked_fill(blocks == own_block[:, None], float("inf"))
    best = scores.topk(min(top_k + extra, n_blocks), dim=-1)
    chosen = torch.zeros(T, n_blocks, dtype=torch.bool)
    chosen.scatter_(1, best.indices, best.values > float("-inf"))
    mask = chosen[:, torch.arange(T) // block_size]
    return mask & torch.ones(T, T, dtype=torch.bool).tril() if causal else mask


def test_moba_choice(capsys):
    exercises.check_moba_choice(moba_choice)
    assert capsys.readouterr().out.startswith("Correct: ")
    whole_block = lambda q, k, b, n: moba_choice(q, k, b, n, causal=False)  # noqa: E731
    expect_message(exercises.check_moba_choice, whole_block, "which is in its future")
    not_forced = lambda q, k, b, n: moba_choice(q, k, b, n, own=False)  # noqa: E731
    expect_message(exercises.check_moba_choice, not_forced, "must read its own block")
    one_more = lambda q, k, b, n: moba_choice(q, k, b, n, extra=1)  # noqa: E731
    expect_message(exercises.check_moba_choice, one_more, "top_k = 2 counts its own block")


def recall(chosen, target, k):
    best = target.topk(k, dim=-1).indices  # (T, k)
    hits = (best[:, :, None] == chosen[:, None, :]).any(-1)  # (T, k)
    return hits.double().mean(-1)[k:]


def test_recall(capsys):
    exercises.check_recall(recall)
    assert capsys.readouterr().out.startswith("Correct: ")

    def every_query(c, t, k):
        return (t.topk(k, -1).indices[:, :, None] == c[:, None]).any(-1).double().mean(-1)

    expect_message(exercises.check_recall, every_query, "should return one recall per query")
    as_count = lambda c, t, k: recall(c, t, k) * k  # noqa: E731
    expect_message(exercises.check_recall, as_count, "a recall is a share")

    def no_topk(c, t, k):
        return (t.argsort(-1)[:, :k, None] == c[:, None]).any(-1).double().mean(-1)[k:]

    expect_message(exercises.check_recall, no_topk, "compare the chosen ids")
