"""How a sequence is split across P ranks for ring and all-gather attention.

Each of P ranks holds the same positions of the queries, keys and values. Two layouts:
``"contiguous"`` gives rank r the r-th of P equal chunks; ``"zigzag"`` cuts the sequence into
2P chunks and gives rank r chunks r and 2P - 1 - r, one from each end, so that under a causal
mask every rank has the same work.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_bool, check_choice, check_int, shape_of

LAYOUTS = ("contiguous", "zigzag")


def chunk_ranges(
    length: int, world_size: int, layout: str = "contiguous", name: str = "length"
) -> list[list[tuple[int, int]]]:
    """The (start, stop) position ranges each rank holds, one list per rank, in shard order.

    contiguous: rank r holds [r n, (r + 1) n) with n = length / P. zigzag: n = length / (2P),
    rank r holds chunks r and 2P - 1 - r. ``name`` is the argument named in the error when
    ``length`` does not split that way.
    """
    check_choice("layout", layout, LAYOUTS)
    check_int("world_size", world_size)
    n_chunks = world_size if layout == "contiguous" else 2 * world_size
    if length % n_chunks:
        raise ValueError(
            f"{name}: the {layout} layout over {world_size} ranks cuts the sequence into "
            f"{n_chunks} equal chunks, so the length must be divisible by {n_chunks}, got {length}"
        )
    n = length // n_chunks
    if layout == "contiguous":
        return [[(r * n, (r + 1) * n)] for r in range(world_size)]
    last = 2 * world_size - 1
    return [[(r * n, (r + 1) * n), ((last - r) * n, (last - r + 1) * n)] for r in range(world_size)]


def shard_positions(length: int, rank: int, world_size: int, layout: str = "contiguous") -> Tensor:
    """The global positions (length / P,) that ``rank`` holds, in shard order."""
    check_int("world_size", world_size)
    check_int("rank", rank, low=0, high=world_size - 1)
    ranges = chunk_ranges(length, world_size, layout)[rank]
    return torch.cat([torch.arange(start, stop) for start, stop in ranges])  # (length / P,)


def shard_sequence(
    x: Tensor, rank: int, world_size: int, layout: str = "contiguous", name: str = "x"
) -> Tensor:
    """Rank ``rank``'s shard of ``x`` (..., L, d): (..., L / P, d), its chunks concatenated."""
    if not isinstance(x, Tensor) or x.dim() < 2:
        raise ValueError(f"{name}: expected a tensor of shape (..., L, d) with at least 2 dims")
    check_int("world_size", world_size)
    check_int("rank", rank, low=0, high=world_size - 1)
    ranges = chunk_ranges(x.size(-2), world_size, layout, name=f"{name}.shape[-2]")[rank]
    return torch.cat([x[..., start:stop, :] for start, stop in ranges], dim=-2)  # (..., L/P, d)


def unshard_sequence(shards: list[Tensor], layout: str = "contiguous") -> Tensor:
    """Inverse of :func:`shard_sequence`: P shards (..., L / P, d), rank order -> (..., L, d)."""
    check_choice("layout", layout, LAYOUTS)
    if not shards or any(s.shape != shards[0].shape for s in shards):
        shapes = [shape_of(s) for s in shards]
        raise ValueError(f"shards: expected P >= 1 shards of one shape, got shapes {shapes}")
    if layout == "contiguous":
        return torch.cat(shards, dim=-2)  # (..., L, d)
    if shards[0].size(-2) % 2:
        raise ValueError(
            f"shards: a zigzag shard holds two equal chunks, so its length must be even, got "
            f"shape {shape_of(shards[0])}"
        )
    halves = [s.chunk(2, dim=-2) for s in shards]  # P x 2 x (..., L / 2P, d)
    ordered = [first for first, _ in halves] + [second for _, second in reversed(halves)]
    return torch.cat(ordered, dim=-2)  # (..., L, d)


def step_work(world_size: int, layout: str = "contiguous", is_causal: bool = True) -> list:
    """The work of every rank at every ring step, as a fraction of one (T/P, S/P) block.

    Entry [r][s] counts the tiles rank r computes at step s, when it holds the key shard of
    rank (r - s) mod P, times their area: a tile is one chunk of queries against one chunk of
    keys (one chunk per shard contiguous, two zigzag), and under ``is_causal`` a tile whose
    keys all come after its queries is skipped, as :func:`attnbook.efficient.ring.ring_attention`
    does. The diagonal tiles, half masked, are computed whole and count in full. Contiguous
    causal: 1 for a shard at or before the rank's own, 0 after it; zigzag: 3/4 at step 0 and
    1/2 at every later step, on every rank.
    """
    check_int("world_size", world_size)
    check_choice("layout", layout, LAYOUTS)
    check_bool("is_causal", is_causal)
    chunks = [
        [start for start, _ in ranges]
        for ranges in chunk_ranges(
            world_size * (1 if layout == "contiguous" else 2), world_size, layout
        )
    ]  # the chunk numbers each rank holds (chunks of one position)
    area = len(chunks[0]) ** 2  # tiles in one (T/P, S/P) block
    return [
        [
            sum(
                not is_causal or k <= q
                for q in chunks[rank]
                for k in chunks[(rank - step) % world_size]
            )
            / area
            for step in range(world_size)
        ]
        for rank in range(world_size)
    ]
