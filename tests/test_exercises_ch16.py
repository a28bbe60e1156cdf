"""Chapter 16's checker, check_causal_tile_kind, on the solution and on typical mistakes."""

import pytest

from attnbook.exercises import ExerciseError, check_causal_tile_kind


def causal_tile_kind(start_m, start_n, block_m, block_n):
    """The book's solution: compare the tile's corner keys with its first and last query."""
    if start_n + block_n - 1 <= start_m:
        return "full"
    if start_n > start_m + block_m - 1:
        return "skip"
    return "diagonal"


def strict_full(start_m, start_n, block_m, block_n):
    """Calls a tile whose last key equals its first query diagonal (wasteful, not exact)."""
    if start_n + block_n - 1 < start_m:
        return "full"
    return "skip" if start_n > start_m + block_m - 1 else "diagonal"


def ignores_block_n(start_m, start_n, block_m, block_n):
    """Assumes square tiles: the last key is start_n + block_m - 1."""
    return causal_tile_kind(start_m, start_n, block_m, block_m)


def skips_the_last_query(start_m, start_n, block_m, block_n):
    """Off by one at the top: skips a tile whose first key is the block's last query."""
    if start_n >= start_m + block_m - 1 and start_n + block_n - 1 > start_m:
        return "skip"
    return causal_tile_kind(start_m, start_n, block_m, block_n)


def only_same_start_is_diagonal(start_m, start_n, block_m, block_n):
    """Treats only the tile starting at the same index as diagonal."""
    if start_n == start_m:
        return "diagonal"
    return "full" if start_n < start_m else "skip"


def test_the_solution_passes(capsys):
    check_causal_tile_kind(causal_tile_kind)
    assert capsys.readouterr().out.startswith("Correct:")


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (strict_full, r"causal_tile_kind\(4, 1, 4, 4\) returned 'diagonal', expected 'full'"),
        (ignores_block_n, r"causal_tile_kind\(8, 4, 8, 4\) returned 'diagonal', expected 'full'"),
        (skips_the_last_query, r"returned 'skip', expected 'diagonal': some of keys"),
        (only_same_start_is_diagonal, r"\(8, 12, 8, 4\) returned 'skip', expected 'diagonal'"),
        (lambda *args: "masked", r"should return one of \('full', 'diagonal', 'skip'\)"),
    ],
)
def test_wrong_answers_fail_with_a_reason(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        check_causal_tile_kind(wrong)


def test_the_stub_is_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError("exercise")

    check_causal_tile_kind(stub)
    assert capsys.readouterr().out.startswith("Not attempted yet")
