"""What one decoding step costs per layer, dense MLA against DeepSeek-V3.2-Exp's sparse attention.

Counts for one new query against ``length`` cached tokens, with DeepSeek-V3.2-Exp's released
configuration: 128 query heads sharing one MLA latent of 512 + 64 numbers (MQA mode, value 512),
an indexer of 64 heads of width 128 that scores every cached token, and the top 2048 tokens read
by the main attention. Two FLOPs per multiply-add, for scores and weighted values. Bytes as the
released inference code caches them: latents in BF16 (2 bytes a number), indexer keys in FP8
(1 byte a number) with one FP32 scale per 128 numbers.
"""

import torch

from attnbook.core._checks import check_int
from attnbook.core.kv_cache import latent_cache_bytes_per_token

HEADS, LATENT, ROPE, VALUE = 128, 512, 64, 512
INDEX_HEADS, INDEX_DIM, TOP_K = 64, 128, 2048
# per cached token and query: all 128 heads, in MQA mode (one shared latent key and value)
ATTENTION_FLOPS = HEADS * (LATENT + ROPE + VALUE) * 2
INDEX_FLOPS = INDEX_HEADS * INDEX_DIM * 2
LATENT_BYTES = latent_cache_bytes_per_token(1, LATENT, ROPE, torch.bfloat16)  # one layer
INDEX_BYTES = INDEX_DIM + 4  # FP8 numbers and one FP32 scale
PARTS = ("dense", "sparse attention", "indexer")


def decode_cost(length: int, top_k: int = TOP_K) -> dict[str, dict[str, int]]:
    """FLOPs and bytes read by one decoding query against ``length`` cached tokens, one layer.

    Returns ``{"flops": {...}, "bytes": {...}}``, each keyed by :data:`PARTS`: dense MLA reads
    every token; the sparse model's main attention reads ``min(length, top_k)`` tokens and its
    indexer scores all ``length`` of them (the sparse step costs the last two together).
    """
    check_int("length", length)
    check_int("top_k", top_k)
    kept = min(length, top_k)
    return {
        "flops": {
            "dense": length * ATTENTION_FLOPS,
            "sparse attention": kept * ATTENTION_FLOPS,
            "indexer": length * INDEX_FLOPS,
        },
        "bytes": {
            "dense": length * LATENT_BYTES,
            "sparse attention": kept * LATENT_BYTES,
            "indexer": length * INDEX_BYTES,
        },
    }


def _holds(unit: str, condition: str, length: int, top_k: int) -> bool:
    cost = decode_cost(length, top_k)[unit]
    if condition == "sparse wins":
        return cost["sparse attention"] + cost["indexer"] < cost["dense"]
    return cost["indexer"] > cost["sparse attention"]


def first_length(unit: str, condition: str, top_k: int = TOP_K, longest: int = 2**20) -> int:
    """The shortest cache length at which ``condition`` holds for ``unit`` ("flops" or "bytes").

    ``condition`` is ``"sparse wins"`` (indexer plus sparse attention below dense) or
    ``"indexer leads"`` (the indexer above the sparse main attention). Both hold from some
    length on and at every longer one (the sparse attention stops growing at ``top_k``), so a
    bisection over 1 to ``longest`` finds it.
    """
    if unit not in ("flops", "bytes"):
        raise ValueError(f"unit: expected 'flops' or 'bytes', got {unit!r}")
    if condition not in ("sparse wins", "indexer leads"):
        raise ValueError(f"condition: expected 'sparse wins' or 'indexer leads', got {condition!r}")
    if not _holds(unit, condition, longest, top_k):
        raise ValueError(f"{condition!r} never holds for {unit} up to length {longest}")
    low, high = 0, longest  # the condition fails at low (or low = 0) and holds at high
    while high - low > 1:
        middle = (low + high) // 2
        if _holds(unit, condition, middle, top_k):
            high = middle
        else:
            low = middle
    return high
