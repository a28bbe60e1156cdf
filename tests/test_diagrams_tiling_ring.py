"""Chapter 9's tiling grid and chapter 10's ring and timeline: their labels and what they show."""

import matplotlib
import pytest
from helpers import figure_texts

from attnbook.book.diagrams import ring_steps, ring_timeline, tiling_grid
from attnbook.book.diagrams.ring import ring_schedule
from attnbook.efficient.sharding import step_work

matplotlib.use("Agg")


def test_tiling_grid_labels_blocks_the_current_tile_and_running_statistics():
    found = figure_texts(tiling_grid(n_query_blocks=3, n_key_blocks=5, current=(1, 1)))
    assert [f"Q{i}" for i in range(3)] == [t for t in found if t.startswith("Q")]
    assert [f"K{j},V{j}" for j in range(5)] == [t for t in found if t.startswith("K")]
    assert found.count("now") == 1
    assert found.count("m, l, o: final") == 1 and "m, l, o <- updating" in found
    assert any("hatched: skipped" in t for t in found)


def test_tiling_grid_legend_names_the_light_blue_block_being_read():
    figure = tiling_grid(n_query_blocks=3, n_key_blocks=5, current=(2, 2))
    found = figure_texts(figure)
    assert any("light blue (below): K,V block read now" in t for t in found)
    # the strip's block 2 (the current column) is the only one coloured differently
    strip = [p for p in figure.axes[0].patches if p.get_y() < 0.5]
    colours = [tuple(p.get_facecolor()) for p in sorted(strip, key=lambda p: p.get_x())]
    assert len(set(colours)) == 2 and colours.count(colours[2]) == 1


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


def test_step_work_skips_future_tiles_and_levels_zigzag():
    assert step_work(4) == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    zigzag = step_work(4, "zigzag")
    assert zigzag == [[0.75, 0.5, 0.5, 0.5]] * 4
    assert all(sum(row) * 4 == 2 * 4 + 1 for row in zigzag)  # 2P + 1 quarter tiles
    assert step_work(3, "zigzag", is_causal=False) == [[1.0] * 3] * 3
    with pytest.raises(ValueError, match=r"layout: expected one of .*, got 'striped'"):
        step_work(4, "striped")
    with pytest.raises(ValueError, match=r"is_causal: expected True or False, got 1"):
        step_work(4, is_causal=1)
    with pytest.raises(ValueError, match=r"world_size: expected a positive int, got 0"):
        step_work(0)


def test_ring_schedule_runs_at_the_pace_of_the_slowest_rank():
    contiguous = ring_schedule(world_size=4, layout="contiguous", transfer=0.4)
    # rank 3 computes 4 full blocks, its transfers hidden; rank 0 computes 1, then waits
    assert contiguous.finish == pytest.approx([2.4, 2.4, 3.0, 4.0])
    assert contiguous.starts[0] == pytest.approx([0.0, 1.0, 1.4, 2.4])
    assert contiguous.starts[3] == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert contiguous.arrivals[1][0] == pytest.approx((0.0, 0.4))
    assert all(contiguous.arrivals[rank][3] is None for rank in range(4))
    zigzag = ring_schedule(world_size=4, layout="zigzag", transfer=0.4)
    assert zigzag.finish == pytest.approx([2.25] * 4)  # every transfer hidden
    slow_links = ring_schedule(world_size=4, layout="zigzag", transfer=0.6)
    assert slow_links.finish == pytest.approx([0.75 + 0.6 + 0.6 + 0.5] * 4)  # waits on links
    full = ring_schedule(world_size=3, is_causal=False, transfer=2.0)
    assert full.finish == pytest.approx([2.0 + 2.0 + 1.0] * 3)
    with pytest.raises(ValueError, match=r"transfer: expected a finite number > 0, got 0"):
        ring_schedule(transfer=0)


def test_ring_timeline_draws_each_computation_and_transfer():
    found = figure_texts(ring_timeline(world_size=4, transfer=0.4))
    assert [t for t in found if t.startswith("done")] == ["done at 4.00", "done at 2.25"]
    # contiguous: 10 computed steps and 4 x 3 transfers; zigzag: 16 and 12
    assert len([t for t in found if t.startswith("KV")]) == 10 + 12 + 16 + 12
    assert found[:2] == ["KV0", "KV3"]  # rank 0: computes on its own shard, receives rank 3's


def test_ring_timeline_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match=r"world_size: expected an int in \[2, 4\], got 5"):
        ring_timeline(world_size=5)
    with pytest.raises(ValueError, match=r"layouts: expected one of .*, got 'striped'"):
        ring_timeline(layouts=("striped",))
    with pytest.raises(ValueError, match=r"layouts: expected a non-empty tuple"):
        ring_timeline(layouts=())
