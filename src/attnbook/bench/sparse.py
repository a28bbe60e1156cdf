"""Top-k (gathered) attention against explicit and fused dense attention, on the CPU.

At T = 4096 with k = T / 16 keys per query (each query's keys drawn at random among its earlier
ones, -1 where it has fewer than k), the table reports median time and peak extra memory of:
explicit causal attention (:func:`attnbook.scaled_dot_product_attention`), PyTorch's fused
SDPA (``is_causal``), and :func:`attnbook.topk_attention`. The gathered version materialises
every query's keys and values, (B, H, T, k, d_head) each: with its (B, H, T, k) scores and
weights, it needs less memory than the explicit (B, H, T, T) scores and weights only when
k * (d_head + 1) < T, and its per-query gather is slow on a CPU next to SDPA's dense, vectorised
tiles. A sparse kernel that gathers tile by tile (as DeepSeek's) keeps
the memory and reads k keys per query instead of T; this table shows what the plain PyTorch
version costs, which is the honest starting point.
"""

import torch
import torch.nn.functional as F

from attnbook.bench.attention import MIB, _table, time_interleaved
from attnbook.core.attention import scaled_dot_product_attention
from attnbook.sparse.topk import topk_attention

FULL = {"length": 4096, "batch": 1, "heads": 4, "head_dim": 32, "repeats": 3}
QUICK = {"length": 256, "batch": 1, "heads": 2, "head_dim": 16, "repeats": 1}


def causal_random_indices(batch: int, heads: int, length: int, top_k: int, seed: int = 0):
    """(B, H, T, k): k distinct earlier keys per query at random, -1 where fewer exist."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.rand(batch, heads, length, length, generator=generator)  # (B, H, T, S)
    future = torch.ones(length, length, dtype=torch.bool).triu(1)  # (T, S)
    best = noise.masked_fill(future, -1.0).topk(top_k, dim=-1)  # (B, H, T, k)
    return torch.where(best.values >= 0, best.indices, -1)


def run_benchmark(quick: bool = False) -> dict:
    size = QUICK if quick else FULL
    batch, heads, length, width = size["batch"], size["heads"], size["length"], size["head_dim"]
    top_k = length // 16
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, width, generator=generator) for _ in range(3))
    indices = causal_random_indices(batch, heads, length, top_k)
    calls = {
        "explicit": lambda: scaled_dot_product_attention(q, k, v, is_causal=True),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "topk": lambda: topk_attention(q, k, v, indices),
    }
    seconds, peak = time_interleaved(calls, size["repeats"], meter=True)
    return {"size": size, "top_k": top_k, "seconds": seconds, "peak_bytes": peak}


def format_results(results: dict, quick: bool = False) -> str:
    size, top_k = results["size"], results["top_k"]
    rows = [
        [name, f"{results['seconds'][name] * 1e3:.1f}", f"{results['peak_bytes'][name] / MIB:.1f}"]
        for name in ("explicit", "sdpa", "topk")
    ]
    ratio = results["seconds"]["topk"] / results["seconds"]["sdpa"]
    verdict = "faster" if ratio < 1 else "slower"
    lines = [
        f"Top-k attention (T = {size['length']}, k = T/16 = {top_k}, B = {size['batch']}, "
        f"H = {size['heads']}, d_head = {size['head_dim']}{', quick' if quick else ''}): "
        "ms = median time, MiB = peak extra memory of one call",
        *_table(["method", "ms", "MiB"], rows),
        f"gathered top-k is {ratio:.1f}x SDPA's time ({verdict}); it reads {top_k} keys per "
        f"query instead of up to {size['length']}, but materialises T * k * d_head keys and "
        f"values (with scores and weights, less than the explicit T * T scores and weights only "
        f"when k * (d_head + 1) = {top_k * (size['head_dim'] + 1)} < T = {size['length']})",
    ]
    return "\n".join(lines)


def run(quick: bool = False) -> str:
    return format_results(run_benchmark(quick), quick)
