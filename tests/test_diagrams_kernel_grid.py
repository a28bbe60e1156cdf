"""Chapter 16's kernel grid: every tile on or below the diagonal is numbered in its walk."""

import matplotlib
import pytest
from helpers import figure_texts

from attnbook.book.diagrams import kernel_programs
from attnbook.book.diagrams._draw import ORANGE

matplotlib.use("Agg")


def test_forward_programs_walk_their_row_left_to_right():
    found = figure_texts(kernel_programs(n_blocks=3, kernel="forward"))
    assert [t for t in found if t.startswith("program")] == [f"program {i}" for i in range(3)]
    # rows 0, 1, 2 hold 1, 2, 3 tiles, numbered from the left; tiles above are unnumbered
    assert [t for t in found if t.isdigit()] == ["1", "1", "2", "1", "2", "3"]
    assert "each row: one program, left to right" in found
    # blue tiles still mask keys past S: the legend says which mask they lack
    assert any(t.startswith("blue: no causal mask\n") for t in found)


def test_dkdv_programs_walk_their_column_from_the_diagonal_down():
    found = figure_texts(kernel_programs(n_blocks=3, kernel="dkdv"))
    assert [t for t in found if t.startswith("prog.")] == [f"prog. {j}" for j in range(3)]
    # row by row: (0,0) is column 0's first; (1,0) its second, (1,1) column 1's first; ...
    assert [t for t in found if t.isdigit()] == ["1", "2", "1", "3", "2", "1"]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="kernel: expected one of"):
        kernel_programs(kernel="dq")
    with pytest.raises(ValueError, match=r"n_blocks: expected an int in \[2, 6\], got 9"):
        kernel_programs(n_blocks=9)


def test_taller_query_blocks_have_two_diagonal_tiles():
    """BLOCK_M = 2 * BLOCK_N (the GPU forward's 128 by 64): each row has two masked tiles."""
    figure = kernel_programs(n_blocks=3, kernel="forward", ratio=2)
    found = figure_texts(figure)
    assert [t for t in found if t.startswith("K")] == [f"K{j}" for j in range(6)]
    # row i reads key blocks 0 .. 2i + 1: 2, 4 and 6 tiles, numbered from the left
    assert [t for t in found if t.isdigit()] == ["1", "2", "1", "2", "3", "4"] + list("123456")
    # the two diagonal tiles of each row are orange; the tiles left of them blue
    colours = [p.get_facecolor() for p in figure.axes[0].patches if p.get_hatch() is None]
    orange = matplotlib.colors.to_rgba(ORANGE)
    assert sum(colour == orange for colour in colours) == 6 and len(colours) == 12


def test_the_dkdv_picture_is_square_only():
    with pytest.raises(ValueError, match="ratio: the dkdv kernel uses square tiles"):
        kernel_programs(kernel="dkdv", ratio=2)
