"""Prefix sharing: full blocks of a common prompt prefix stored once, found by a hash.

A block's keys and values depend on its tokens *and on every token before it*, so a block is
named by a hash of (the previous block's hash, its own tokens): two prompts get the same hash
for block i exactly when their first (i + 1) * block_size tokens agree. :class:`PrefixTable`
maps those hashes to blocks of a :class:`attnbook.PagedKVCache` (vLLM's automatic prefix
caching names blocks this way; SGLang's RadixAttention keeps a radix tree of token sequences). A
new request reuses the blocks of its longest known prefix, raising their reference counts, and
only computes the rest. A block leaves the table when its count drops to zero, so only requests
that run at the same time share; vLLM instead keeps a freed block cached, hash and contents,
until its allocator evicts it to make room.
"""


def block_hashes(tokens: list[int], block_size: int) -> list[int]:
    """One hash per *full* block of ``tokens``, each covering that block and all before it."""
    hashes, previous = [], None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        previous = hash((previous, tuple(tokens[start : start + block_size])))
        hashes.append(previous)
    return hashes


class PrefixTable:
    """Hash of a full block (with its prefix) -> the block holding its keys and values."""

    def __init__(self) -> None:
        self.blocks: dict[int, int] = {}
        self.hash_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.blocks)

    def longest_prefix(self, hashes: list[int]) -> list[int]:
        """The blocks of the longest run of ``hashes``, from the first, already in the table."""
        found = []
        for block_hash in hashes:
            if block_hash not in self.blocks:
                break
            found.append(self.blocks[block_hash])
        return found

    def register(self, hashes: list[int], table: list[int]) -> None:
        """Record that ``table[i]`` holds the block whose hash is ``hashes[i]``."""
        for block_hash, block in zip(hashes, table, strict=False):
            if block_hash not in self.blocks:
                self.blocks[block_hash] = block
                self.hash_of[block] = block_hash

    def forget(self, released: list[int]) -> None:
        """Drop blocks that went back to the free list (their contents will be overwritten)."""
        for block in released:
            block_hash = self.hash_of.pop(block, None)
            if block_hash is not None:
                del self.blocks[block_hash]
