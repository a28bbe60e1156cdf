"""Schematic diagrams of the book, drawn by code in the book's figure style.

Each function draws one diagram and returns its :class:`~matplotlib.figure.Figure`; it takes
only keyword arguments with defaults, so ``diagram()`` draws the chapter's figure. The shared
primitives (canvas, boxes, arrows, labels) are in :mod:`attnbook.diagrams._draw`.
"""

from attnbook.diagrams.ring import ring_steps
from attnbook.diagrams.tiling import tiling_grid

__all__: list[str] = []

# Chapter 1 and chapter 3 (the ch00_03 round).
from attnbook.diagrams.dataflow import self_attention_dataflow  # noqa: E402
from attnbook.diagrams.seq2seq import seq2seq_decoders  # noqa: E402

__all__ += ["seq2seq_decoders", "self_attention_dataflow"]

# Chapter 5: the head split.
from attnbook.diagrams.heads import head_split  # noqa: E402

__all__ += ["head_split"]

# Chapters 7 and 11 (positions, latent attention).
from attnbook.diagrams.latent import mla_data_flow  # noqa: E402
from attnbook.diagrams.rope import rope_rotation  # noqa: E402

__all__ += ["mla_data_flow", "rope_rotation"]

__all__ += ["ring_steps", "tiling_grid"]  # chapters 9 and 10
