"""Chapter 17's block-table diagram: logical blocks, the pool, shared and free blocks."""

import matplotlib
import pytest
from helpers import figure_texts

from attnbook.book.diagrams import block_tables

matplotlib.use("Agg")


def test_block_tables_labels_fill_sharing_and_free_blocks():
    found = figure_texts(block_tables())
    assert [t for t in found if t.startswith("A")] == ["A0: 4/4", "A1: 4/4", "A2: 3/4"]
    assert [t for t in found if t.startswith("B")] == ["B0: 4/4", "B1: 3/4"]
    assert "block 0\nref 2" in found  # shared by A and B
    assert {"block 4\nfree", "block 5\nfree", "block 7\nfree"} <= set(found)
    assert "block 2" in found and "seq A" in found and "pool" in found


def test_block_tables_refuses_a_block_outside_the_pool():
    with pytest.raises(ValueError, match="tables: block 9"):
        block_tables(tables={"A": [9]}, lengths={"A": 1})
