"""Schematic diagrams of the book, drawn by code in the book's figure style.

Each function draws one diagram and returns its :class:`~matplotlib.figure.Figure`; it takes
only keyword arguments with defaults, so ``diagram()`` draws the chapter's figure. The shared
primitives (canvas, boxes, arrows, labels) are in :mod:`attnbook.book.diagrams._draw`.
"""

from attnbook.book.diagrams.book_map import book_map
from attnbook.book.diagrams.cache_heads import cache_per_token
from attnbook.book.diagrams.circuits import induction_circuit
from attnbook.book.diagrams.dataflow import attention_shapes, self_attention_dataflow
from attnbook.book.diagrams.groups import query_groups
from attnbook.book.diagrams.head_gates import head_gates
from attnbook.book.diagrams.head_turns import head_turns
from attnbook.book.diagrams.heads import head_split, multi_head_overview
from attnbook.book.diagrams.kernel_grid import kernel_programs
from attnbook.book.diagrams.kernel_memory import kernel_memory
from attnbook.book.diagrams.kv_cache import kv_cache_steps
from attnbook.book.diagrams.latent import mla_absorbed_flow, mla_data_flow
from attnbook.book.diagrams.linear import (
    cache_versus_state,
    chunked_delta_rule,
    delta_rule_update,
    gated_deltanet_layer,
)
from attnbook.book.diagrams.masks import mask_gallery
from attnbook.book.diagrams.modern import attention_options
from attnbook.book.diagrams.preview import book_preview
from attnbook.book.diagrams.ring import ring_steps, ring_timeline
from attnbook.book.diagrams.rope import rope_rotation
from attnbook.book.diagrams.seq2seq import seq2seq_decoders
from attnbook.book.diagrams.serving import block_tables
from attnbook.book.diagrams.sparse import indexer_flow, key_selection
from attnbook.book.diagrams.tiling import tiling_grid
from attnbook.book.diagrams.tiny_gpt import tiny_gpt_variants

__all__ = [
    "attention_options",  # chapter 15
    "attention_shapes",  # chapter 0
    "book_map",  # the introduction
    "book_preview",  # the introduction
    "cache_per_token",  # chapter 6
    "block_tables",  # chapter 17
    "cache_versus_state",  # chapter 18
    "chunked_delta_rule",  # chapter 18
    "delta_rule_update",  # chapter 18
    "gated_deltanet_layer",  # chapter 18
    "head_split",  # chapter 5
    "induction_circuit",  # chapter 14
    "indexer_flow",  # chapter 19
    "key_selection",  # chapter 19
    "mask_gallery",  # chapter 4
    "kernel_memory",  # chapter 16
    "kernel_programs",  # chapter 16
    "kv_cache_steps",  # chapter 8
    "mla_absorbed_flow",  # chapter 11
    "mla_data_flow",  # chapter 11
    "multi_head_overview",  # chapter 5
    "ring_steps",  # chapter 10
    "ring_timeline",  # chapter 10
    "rope_rotation",  # chapter 7
    "self_attention_dataflow",  # chapter 3
    "seq2seq_decoders",  # chapter 1
    "tiling_grid",  # chapter 9
    "tiny_gpt_variants",  # chapter 12
    "query_groups",  # chapter 6
    "head_gates",  # chapter 13
    "head_turns",  # chapter 13
]
