"""Schematic diagrams of the book, drawn by code in the book's figure style.

Each function draws one diagram and returns its :class:`~matplotlib.figure.Figure`; it takes
only keyword arguments with defaults, so ``diagram()`` draws the chapter's figure. The shared
primitives (canvas, boxes, arrows, labels) are in :mod:`attnbook.diagrams._draw`.
"""

from attnbook.diagrams.ring import ring_steps
from attnbook.diagrams.tiling import tiling_grid

__all__: list[str] = []
__all__ += ["ring_steps", "tiling_grid"]  # chapters 9 and 10
