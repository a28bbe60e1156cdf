"""Serving attention: a paged KV cache, paged attention, continuous batching, prefix sharing,
and a quantized cache (chapter 17)."""

from attnbook.serving.batching import Request, ServeStats, ServingEngine, serve
from attnbook.serving.kv_memory import MemoryReport, kv_utilisation, random_workload
from attnbook.serving.paged_attention import gather_kv, paged_attention
from attnbook.serving.paged_cache import CacheFullError, PagedKVCache
from attnbook.serving.paged_model import paged_forward
from attnbook.serving.prefix_sharing import PrefixTable, block_hashes
from attnbook.serving.quantized_cache import Quantized, QuantizedKV, attention_error, quantize

__all__ = [
    "CacheFullError",
    "MemoryReport",
    "PagedKVCache",
    "PrefixTable",
    "Quantized",
    "QuantizedKV",
    "Request",
    "ServeStats",
    "ServingEngine",
    "attention_error",
    "block_hashes",
    "gather_kv",
    "kv_utilisation",
    "paged_attention",
    "paged_forward",
    "quantize",
    "random_workload",
    "serve",
]
