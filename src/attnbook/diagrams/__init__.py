"""Schematic diagrams of the book, drawn by code in the book's figure style.

Each function draws one diagram and returns its :class:`~matplotlib.figure.Figure`; it takes
only keyword arguments with defaults, so ``diagram()`` draws the chapter's figure. The shared
primitives (canvas, boxes, arrows, labels) are in :mod:`attnbook.diagrams._draw`.
"""

__all__: list[str] = []

# Chapters 7 and 11 (positions, latent attention).
from attnbook.diagrams.latent import mla_data_flow  # noqa: E402
from attnbook.diagrams.rope import rope_rotation  # noqa: E402

__all__ += ["mla_data_flow", "rope_rotation"]
