"""Chapter 17's exercise checkers: block arithmetic, the gather, beams' blocks, block hashes."""

from collections.abc import Callable

import torch

from attnbook.exercises._common import _as_tensor, _call, _checker, _fail, _generator, _succeed
from attnbook.serving.paged_cache import PagedKVCache

# Chapter 17: how many slots a paged sequence holds; its keys read through a block table; the
# blocks forked beams use; hashes that name a block together with its prefix.


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


def _beams_on_a_pool(prompt_len: int, n_beams: int, n_new: int, block_size: int) -> int:
    """Blocks a real PagedKVCache uses after forking ``n_beams`` beams that each grow."""
    pool = PagedKVCache(64, block_size, n_layers=1, n_kv_heads=1, head_dim=1)
    pool.add_sequence(0)
    pool.reserve(0, prompt_len)
    for beam in range(1, n_beams):
        pool.fork(0, beam)
    for beam in range(n_beams):
        pool.reserve(beam, n_new)
    return pool.n_used_blocks


@_checker
def check_beam_blocks(beam_blocks: Callable[[int, int, int, int], int]) -> None:
    """``beam_blocks(prompt_len, n_beams, n_new, block_size)``: blocks used by forked beams."""
    cases = [(30, 4, 5, 8), (32, 4, 5, 8), (30, 4, 0, 8), (30, 4, 1, 8), (30, 1, 5, 8)]
    cases += [(5, 3, 9, 4), (7, 2, 1, 1), (12, 3, 20, 16), (3, 5, 2, 16)]
    for prompt_len, n_beams, n_new, block_size in cases:
        expected = _beams_on_a_pool(prompt_len, n_beams, n_new, block_size)
        call = f"beam_blocks({prompt_len}, {n_beams}, {n_new}, {block_size})"
        got = _call(beam_blocks, call, prompt_len, n_beams, n_new, block_size)
        if got != expected:
            partial = prompt_len % block_size
            prompt_blocks = -(-prompt_len // block_size)
            new_per_beam = -(-(prompt_len + n_new) // block_size) - prompt_blocks
            from_n_new_alone = -(-n_new // block_size)
            if got == expected + n_beams * (from_n_new_alone - new_per_beam) != expected:
                hint = (
                    "a beam's first new tokens fill the free slots of the prompt's last block; "
                    "count its new blocks from prompt_len + n_new, not from n_new alone"
                )
            elif partial and n_new and n_beams > 1:
                hint = (
                    "the prompt's partly filled last block is written by every beam: each "
                    "beam but the last copies it, the last writes into the original"
                )
            elif not partial and n_beams > 1:
                hint = "a prompt that fills its last block leaves nothing to copy"
            elif not n_new:
                hint = "beams that have not grown share every block: nothing is copied yet"
            else:
                hint = "count the prompt's blocks once and each beam's new blocks"
            _fail(f"{call} should be {expected} (what PagedKVCache uses), got {got!r}: {hint}")
    _succeed("your count matches the blocks a PagedKVCache hands out to forked beams")


@_checker
def check_block_hashes(block_hashes: Callable[[list[int], int], list]) -> None:
    """``block_hashes(tokens, block_size)``: block i's hash says whether (i+1)*bs tokens agree."""
    base = [5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
    variants = {
        "the same tokens": base,
        "block 0 changed": [7] + base[1:],
        "block 2 changed": base[:8] + [0] + base[9:],
        "block 0 equal to block 1": [5, 9, 2, 6] + base[4:],
        "two tokens more": base + [1, 2],
        "one token fewer": base[:-1],
        "tokens 0 and 1 swapped": [1, 5, 4, 1] + base[4:],
        "block 1's last token changed": base[:7] + [0] + base[8:],
    }
    block_size = 4
    reference = _call(block_hashes, f"block_hashes({base}, 4)", base, block_size)
    if not isinstance(reference, list | tuple):
        _fail(f"block_hashes should return a list of hashes, got {type(reference).__name__}")
    for what, tokens in variants.items():
        call = f"block_hashes({tokens}, {block_size})"
        got = _call(block_hashes, call, tokens, block_size)
        n_full = len(tokens) // block_size
        if len(got) != n_full:
            _fail(
                f"{call} should return {n_full} hashes, one per *full* block, got {len(got)}: "
                "a partly filled block is never shared"
            )
        for i in range(min(n_full, len(reference))):
            same_prefix = tokens[: (i + 1) * block_size] == base[: (i + 1) * block_size]
            if (got[i] == reference[i]) != same_prefix:
                relation = "agree" if same_prefix else "differ"
                _fail(
                    f"{what}: the first {(i + 1) * block_size} tokens {relation} with {base}, "
                    f"so hash {i} should {'match' if same_prefix else 'differ'}; a block's "
                    "keys depend on every token before it, and on their order, so its hash must "
                    "cover them too"
                )
    prefix_hashes = _call(block_hashes, "block_hashes(tokens, 4)", [5, 9, 2, 6, 5, 9, 2, 6], 4)
    if prefix_hashes[0] == prefix_hashes[1]:
        _fail(
            "blocks 0 and 1 of [5, 9, 2, 6, 5, 9, 2, 6] hold the same tokens but follow "
            "different prefixes, so their hashes must differ"
        )
    _succeed("each hash names a full block together with everything before it")
