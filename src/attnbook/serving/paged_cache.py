"""A paged KV cache: a pool of fixed-size blocks, block tables, reference counts, copy-on-write.

Chapter 8's :class:`attnbook.KVCache` keeps one contiguous tensor per sequence. A serving engine
keeps one *pool* instead: ``n_blocks`` blocks of ``block_size`` positions each, for every layer
and key/value head (Kwon et al., 2023). A sequence owns a *block table*, the list of the blocks
holding its positions in order, so position p lives in block ``table[p // block_size]`` at
offset ``p % block_size``. Blocks come from a free list when a sequence grows and go back when
it ends; a block may sit in several tables at once (a shared prefix, a forked sequence), and its
*reference count* says in how many. Appending to a shared block first copies it
(copy-on-write), so no sequence ever writes into another's positions.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_int


class CacheFullError(RuntimeError):
    """The pool has too few free blocks for a request; nothing was allocated or changed."""


class PagedKVCache:
    """A pool of ``n_blocks`` KV blocks of ``block_size`` positions for ``n_layers`` layers.

    ``keys`` and ``values`` are (L, n_blocks, H_kv, block_size, d_head). Sequences are named by
    any hashable id: :meth:`add_sequence`, :meth:`reserve` (make room for more positions,
    allocating blocks and copying a shared last block), :meth:`fork` (share every block),
    :meth:`free` (drop a sequence, returning blocks whose count reaches zero). A request the
    free list cannot satisfy raises :class:`CacheFullError` before anything changes.
    """

    def __init__(
        self,
        n_blocks: int,
        block_size: int,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        for name, value in (
            ("n_blocks", n_blocks),
            ("block_size", block_size),
            ("n_layers", n_layers),
            ("n_kv_heads", n_kv_heads),
            ("head_dim", head_dim),
        ):
            check_int(name, value)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype: expected a floating torch dtype, got {dtype!r}")
        self.n_blocks = n_blocks
        self.block_size = block_size
        shape = (n_layers, n_blocks, n_kv_heads, block_size, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (L, N, H_kv, bs, d_head)
        self.values = torch.zeros(shape, dtype=dtype, device=device)  # (L, N, H_kv, bs, d_head)
        self.free_blocks = list(range(n_blocks - 1, -1, -1))  # popped from the end: 0 first
        self.ref_counts = [0] * n_blocks
        self.block_tables: dict = {}
        self.lengths: dict = {}

    @property
    def n_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def n_used_blocks(self) -> int:
        return self.n_blocks - len(self.free_blocks)

    def __repr__(self) -> str:
        return (
            f"PagedKVCache({self.n_used_blocks}/{self.n_blocks} blocks used, "
            f"block_size={self.block_size}, sequences={len(self.block_tables)})"
        )

    def _check_sequence(self, seq_id) -> None:
        if seq_id not in self.block_tables:
            raise ValueError(f"seq_id: no sequence {seq_id!r} in the cache")

    def add_sequence(self, seq_id, shared_blocks: list[int] | tuple = ()) -> None:
        """Start an empty sequence, or one whose first blocks are ``shared_blocks`` (full ones).

        Each shared block's reference count goes up by one; the sequence's length starts at
        ``len(shared_blocks) * block_size`` positions.
        """
        if seq_id in self.block_tables:
            raise ValueError(f"seq_id: sequence {seq_id!r} is already in the cache")
        for block in shared_blocks:
            if not 0 <= block < self.n_blocks or self.ref_counts[block] == 0:
                raise ValueError(f"shared_blocks: block {block!r} is not an allocated block")
        for block in shared_blocks:
            self.ref_counts[block] += 1
        self.block_tables[seq_id] = list(shared_blocks)
        self.lengths[seq_id] = len(shared_blocks) * self.block_size

    def blocks_needed(self, seq_id, n_new: int) -> int:
        """Free blocks that :meth:`reserve` (``seq_id``, ``n_new``) would take, copies included."""
        self._check_sequence(seq_id)
        table, length = self.block_tables[seq_id], self.lengths[seq_id]
        new_blocks = -(-(length + n_new) // self.block_size) - len(table)
        partial_shared = length % self.block_size and self.ref_counts[table[-1]] > 1
        return new_blocks + int(bool(partial_shared and n_new))

    def reserve(self, seq_id, n_new: int) -> None:
        """Make room for ``n_new`` more positions of ``seq_id``; its length grows by ``n_new``.

        A last block shared with another sequence and only partly full is copied first
        (copy-on-write); new blocks come off the free list. :class:`CacheFullError` if the free
        list is too short, raised before anything changes.
        """
        check_int("n_new", n_new, low=0)
        needed = self.blocks_needed(seq_id, n_new)
        if needed > self.n_free_blocks:
            raise CacheFullError(
                f"the pool has {self.n_free_blocks} free blocks of {self.n_blocks}; sequence "
                f"{seq_id!r} needs {needed} more to grow by {n_new} positions"
            )
        table, length = self.block_tables[seq_id], self.lengths[seq_id]
        if n_new and length % self.block_size and self.ref_counts[table[-1]] > 1:
            table[-1] = self._copy_block(table[-1])
        while len(table) * self.block_size < length + n_new:
            table.append(self._allocate())
        self.lengths[seq_id] = length + n_new

    def _allocate(self) -> int:
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block

    def _copy_block(self, block: int) -> int:
        """Copy-on-write: a private copy of a shared block; the shared one loses a reference."""
        copy = self._allocate()
        self.keys[:, copy] = self.keys[:, block]  # (L, H_kv, bs, d_head)
        self.values[:, copy] = self.values[:, block]  # (L, H_kv, bs, d_head)
        self.ref_counts[block] -= 1
        return copy

    def fork(self, parent, child) -> None:
        """A new sequence ``child`` sharing every block of ``parent`` (parallel sampling)."""
        self._check_sequence(parent)
        if child in self.block_tables:
            raise ValueError(f"child: sequence {child!r} is already in the cache")
        for block in self.block_tables[parent]:
            self.ref_counts[block] += 1
        self.block_tables[child] = list(self.block_tables[parent])
        self.lengths[child] = self.lengths[parent]

    def free(self, seq_id) -> list[int]:
        """Drop ``seq_id``; return the blocks whose count reached zero (now on the free list)."""
        self._check_sequence(seq_id)
        released = []
        for block in reversed(self.block_tables.pop(seq_id)):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                released.append(block)
                self.free_blocks.append(block)
        del self.lengths[seq_id]
        return released

    def slots(self, seq_id, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The block and the offset in it (each shaped like ``positions``) of each position."""
        table = torch.tensor(self.block_tables[seq_id], device=self.keys.device)  # (n_table,)
        return table[positions // self.block_size], positions % self.block_size

    def write(self, layer: int, blocks: Tensor, offsets: Tensor, k: Tensor, v: Tensor) -> None:
        """Store keys and values (B, H_kv, T, d_head) at slots ``blocks``, ``offsets`` (B, T)."""
        self.keys[layer, blocks, :, offsets] = k.transpose(1, 2)  # slots (B, T, H_kv, d_head)
        self.values[layer, blocks, :, offsets] = v.transpose(1, 2)  # slots (B, T, H_kv, d_head)

    def table_tensor(self, seq_ids: list) -> Tensor:
        """The block tables of ``seq_ids`` as (B, n_max) int64, short rows padded with block 0."""
        tables = [self.block_tables[seq_id] for seq_id in seq_ids]
        width = max(len(table) for table in tables)
        rows = [table + [0] * (width - len(table)) for table in tables]
        return torch.tensor(rows, dtype=torch.long, device=self.keys.device)  # (B, n_max)
