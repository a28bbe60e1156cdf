"""attnbook: the small library behind the book *Attention from Scratch*.

Shape notation used everywhere: B batch, T query length, S key length, H query heads,
H_kv key/value heads, D model width, d_head head width. Boolean masks mean True = attend.
"""

from attnbook.additive import AdditiveAttention
from attnbook.attention import masked_softmax, scaled_dot_product_attention
from attnbook.device import get_device, set_seed
from attnbook.heads import merge_heads, repeat_kv, split_heads
from attnbook.masks import causal_mask, padding_mask
from attnbook.multihead import GroupedQueryAttention, MultiHeadAttention
from attnbook.plotting import plot_attention, plot_heads
from attnbook.trace import ShapeTrace, record, trace_shapes

__all__ = [
    "AdditiveAttention",
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "ShapeTrace",
    "causal_mask",
    "get_device",
    "masked_softmax",
    "merge_heads",
    "padding_mask",
    "plot_attention",
    "plot_heads",
    "record",
    "repeat_kv",
    "scaled_dot_product_attention",
    "set_seed",
    "split_heads",
    "trace_shapes",
]
