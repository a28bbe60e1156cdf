"""Chapter 17's checkers accept the solutions and explain three typical mistakes each."""

import re

import pytest

from attnbook import exercises
from attnbook.exercises import ExerciseError


def expect_message(checker, fn, fragment):
    with pytest.raises(ExerciseError, match=re.escape(fragment)):
        checker(fn)


def paged_slots(length, block_size):
    return block_size * -(-length // block_size)


def gather_keys(pool, table, length):
    return pool[table].reshape(-1, pool.size(-1))[:length]


def test_paged_slots(capsys):
    exercises.check_paged_slots(paged_slots)
    assert capsys.readouterr().out.startswith("Correct: ")
    check = exercises.check_paged_slots
    expect_message(check, lambda n, b: b * (n // b), "round the length *up*")
    expect_message(check, lambda n, b: b * (n // b + 1), "needs no extra block")
    expect_message(check, lambda n, b: n, "paged_slots(1, 4) should be 4, got 1")


def test_gather_keys(capsys):
    exercises.check_gather_keys(gather_keys)
    assert capsys.readouterr().out.startswith("Correct: ")
    check = exercises.check_gather_keys
    expect_message(
        check, lambda p, t, n: gather_keys(p, sorted(t), n), "blocks are read in the table's order"
    )
    expect_message(check, lambda p, t, n: p[t].reshape(-1, p.size(-1)), "should have shape (10, 3)")
    expect_message(
        check, lambda p, t, n: p[t].transpose(0, 1).reshape(-1, p.size(-1))[:n], "position 1"
    )


def test_stubs_read_as_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    exercises.check_paged_slots(stub)
    exercises.check_gather_keys(stub)
    assert capsys.readouterr().out.count("Not attempted yet") == 2
