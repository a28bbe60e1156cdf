"""Chapter 3's exercise checkers: how long a sequence's score tensor may be for a memory budget."""

from collections.abc import Callable

from attnbook.exercises._common import _call, _checker, _fail, _succeed

# Chapter 3: how long a sequence's score tensor may be for a memory budget.


@_checker
def check_largest_length(fn: Callable[[int, int, int], int]) -> None:
    """``fn(budget_bytes, n_heads, bytes_per_score)``: the largest T whose (1, H, T, T) fits."""
    for budget, n_heads, size in [(2**30, 8, 4), (2**20, 1, 2), (10**6, 3, 4), (100, 1, 4)]:
        call = f"largest_length({budget}, {n_heads}, {size})"
        answer = _call(fn, call, budget, n_heads, size)
        if isinstance(answer, bool) or not isinstance(answer, int):
            _fail(f"{call} should return a whole number of tokens (int), got {answer!r}")

        def needed(length: int, n_heads: int = n_heads, size: int = size) -> int:
            return n_heads * length * length * size

        if needed(answer) > budget:
            _fail(
                f"{call} returned {answer}, but {n_heads} x {answer} x {answer} scores of "
                f"{size} bytes need {needed(answer):,} bytes, more than the {budget:,} budgeted"
            )
        if needed(answer + 1) <= budget:
            _fail(
                f"{call} returned {answer}, but T = {answer + 1} fits too: it needs "
                f"{needed(answer + 1):,} of the {budget:,} bytes"
            )
    _succeed("the score tensor grows as H T^2, so T is the square root of budget / (H x bytes)")
