"""Chapter 9's tiling grid and chapter 10's ring: their labels and what they show."""

import matplotlib
import pytest
from helpers import figure_texts

from attnbook.book.diagrams import ring_steps, tiling_grid

matplotlib.use("Agg")


def test_tiling_grid_labels_blocks_the_current_tile_and_running_statistics():
    found = figure_texts(tiling_grid(n_query_blocks=3, n_key_blocks=5, current=(1, 1)))
    assert [f"Q{i}" for i in range(3)] == [t for t in found if t.startswith("Q")]
    assert [f"K{j},V{j}" for j in range(5)] == [t for t in found if t.startswith("K")]
    assert found.count("now") == 1
    assert found.count("m, l, o: final") == 1 and "m, l, o <- updating" in found
    assert any("hatched: skipped" in t for t in found)


def test_ring_steps_moves_every_shard_one_rank_per_step():
    found = figure_texts(ring_steps(world_size=3))
    assert [t for t in found if t.startswith("step")] == ["step 0", "step 1", "step 2"]
    shards = [t for t in found if t.startswith("KV")]
    # per step, ranks 0, 1, 2 hold the shard of rank (r - step) mod 3
    assert shards == ["KV0", "KV1", "KV2", "KV2", "KV0", "KV1", "KV1", "KV2", "KV0"]
    assert found.count("Q0") == 3


def test_ring_steps_refuses_a_ring_it_cannot_colour():
    with pytest.raises(ValueError, match=r"world_size: expected an int in \[2, 4\], got 9"):
        ring_steps(world_size=9)
