"""Chapter 16's exercise checker: which tiles a causal FlashAttention kernel visits, and how."""

from collections.abc import Callable

from attnbook.exercises._common import _call, _checker, _fail, _succeed

# Chapter 16: the Triton FlashAttention kernel.

KINDS = ("full", "diagonal", "skip")


def _expected_kind(start_m: int, start_n: int, block_m: int, block_n: int) -> str:
    if start_n + block_n - 1 <= start_m:
        return "full"  # the tile's last key is at or before its first query
    if start_n > start_m + block_m - 1:
        return "skip"  # the tile's first key is after its last query
    return "diagonal"


@_checker
def check_causal_tile_kind(fn: Callable[[int, int, int, int], str]) -> None:
    """``fn(start_m, start_n, block_m, block_n)``: "full", "diagonal" or "skip" for the tile of
    queries start_m .. start_m + block_m - 1 and keys start_n .. start_n + block_n - 1 under a
    causal mask (query i sees keys 0..i)."""
    cases = [
        (0, 0, 4, 4), (4, 0, 4, 4), (0, 4, 4, 4), (8, 4, 4, 4), (4, 4, 4, 4),
        (8, 0, 8, 4), (8, 4, 8, 4), (8, 8, 8, 4), (8, 12, 8, 4), (8, 16, 8, 4),
        (4, 1, 4, 4), (4, 3, 4, 2), (3, 6, 4, 2), (3, 7, 4, 2), (0, 0, 1, 1), (2, 1, 1, 1),
    ]  # fmt: skip
    for start_m, start_n, block_m, block_n in cases:
        call = f"causal_tile_kind({start_m}, {start_n}, {block_m}, {block_n})"
        kind = _call(fn, call, start_m, start_n, block_m, block_n)
        if kind not in KINDS:
            _fail(f"{call} should return one of {KINDS}, got {kind!r}")
        expected = _expected_kind(start_m, start_n, block_m, block_n)
        if kind == expected:
            continue
        queries = f"queries {start_m}..{start_m + block_m - 1}"
        keys = f"keys {start_n}..{start_n + block_n - 1}"
        why = {
            "full": f"every one of {keys} is at or before the first of {queries}",
            "skip": f"every one of {keys} is after the last of {queries}",
            "diagonal": f"some of {keys} are visible to {queries} and some are not",
        }[expected]
        _fail(f"{call} returned {kind!r}, expected {expected!r}: {why}")
    _succeed("full below the diagonal, masked on it, skipped above it, for any block sizes")
