"""Chapter 17's exercise checkers: the block arithmetic and the gather of a paged cache."""

from collections.abc import Callable

import torch

from attnbook.exercises._common import _as_tensor, _call, _checker, _fail, _generator, _succeed

# Chapter 17: how many slots a paged sequence holds; its keys read through a block table.


@_checker
def check_paged_slots(paged_slots: Callable[[int, int], int]) -> None:
    """``paged_slots(length, block_size)``: the token slots a paged sequence of ``length`` holds."""
    for block_size in (1, 4, 16):
        for length in (1, 3, 4, 5, 16, 17, 33):
            expected = block_size * -(-length // block_size)
            got = _call(paged_slots, f"paged_slots({length}, {block_size})", length, block_size)
            if got != expected:
                hint = (
                    "a sequence holds whole blocks: round the length *up* to a multiple of the "
                    "block size"
                )
                if length % block_size == 0:
                    hint = "a length that fills its last block exactly needs no extra block"
                _fail(
                    f"paged_slots({length}, {block_size}) should be {expected}, got {got!r}: {hint}"
                )
    _succeed("a paged sequence holds its length rounded up to whole blocks")


@_checker
def check_gather_keys(gather_keys: Callable) -> None:
    """``gather_keys(pool, table, length)``: pool (N, bs, d), a block table -> keys (length, d)."""
    pool = torch.randn(6, 4, 3, generator=_generator(0))  # (N, bs, d_head)
    for table, length in (([4, 1, 3], 10), ([2], 3), ([0, 5], 8)):
        expected = pool[table].reshape(-1, 3)[:length]  # (length, d_head)
        call = f"gather_keys(pool, {table}, {length})"
        got = _as_tensor(
            _call(gather_keys, call, pool, table, length), call, "a (length, d) tensor"
        )
        if tuple(got.shape) != (length, 3):
            _fail(f"{call} should have shape ({length}, 3), got {tuple(got.shape)}")
        if not torch.equal(got, expected):
            rows = [i for i in range(length) if not torch.equal(got[i], expected[i])]
            _fail(
                f"{call}: position {rows[0]} should be slot {rows[0] % 4} of block "
                f"{table[rows[0] // 4]} (the table's entry {rows[0] // 4}); blocks are read in "
                f"the table's order, whatever their numbers"
            )
    _succeed("the keys come back in position order through the block table")
