"""Attention kernels and modules on the CPU: time and extra memory, as ratio tables.

:func:`kernel_benchmark` compares the library's explicit attention, :func:`attnbook.
tiled_attention` and PyTorch's fused ``F.scaled_dot_product_attention`` on (B, H, T, d_head)
tensors; :func:`module_benchmark` compares the library's modules (``need_weights=False``) with
``nn.MultiheadAttention`` and with a bare implementation that calls the same projections and
``F.scaled_dot_product_attention`` with no checks and no tracing. :func:`run` formats both.

Timing: a fixed number of threads, one warm-up call of every implementation, then ``repeats``
rounds that call each implementation once in turn (so a slow spell of a shared machine hits all
of them alike), under ``torch.inference_mode``; the median is reported. Memory: the peak bytes
of the tensors created during one call, from :class:`attnbook.TensorMemoryMeter` (the warm-up).
Targets are printed with a verdict; nothing here asserts them.
"""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnbook.core.attention import scaled_dot_product_attention
from attnbook.core.device import set_seed
from attnbook.core.memory import TensorMemoryMeter
from attnbook.efficient.tiled import tiled_attention
from attnbook.layers.multihead import GroupedQueryAttention, MultiHeadAttention

MIB = 2**20
MODULE_RATIO_TARGET = 1.15  # attnbook module time / bare SDPA time, at T >= 1024
MODULE_TARGET_MIN_T = 1024
MEMORY_RATIO_TARGET = 1 / 8  # tiled peak extra memory / explicit, at T = MEMORY_TARGET_T
MEMORY_TARGET_T = 4096

FULL = {"lengths": (256, 1024, 2048, 4096), "batch": 4, "heads": 8, "head_dim": 64, "repeats": 3}
QUICK = {"lengths": (64, 128), "batch": 2, "heads": 4, "head_dim": 16, "repeats": 1}
KV_HEADS = 2  # the grouped-query module's key/value heads


@dataclass(frozen=True)
class KernelResult:
    """Median seconds and peak extra bytes of one call, per implementation, at one T."""

    length: int
    seconds: dict[str, float]
    peak_bytes: dict[str, int]


@dataclass(frozen=True)
class ModuleResult:
    """Median seconds per implementation for one module kind ("MHA" or "GQA") at one T."""

    length: int
    kind: str
    seconds: dict[str, float]


def time_interleaved(
    calls: dict[str, Callable[[], object]], repeats: int, meter: bool = False
) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds of each call over ``repeats`` interleaved rounds, after one warm-up each.

    With ``meter``, each warm-up runs under a :class:`TensorMemoryMeter` and its peak bytes are
    returned too (otherwise an empty dict).
    """
    peak_bytes = {}
    with torch.inference_mode():
        for name, call in calls.items():
            if meter:
                with TensorMemoryMeter() as memory:
                    call()
                peak_bytes[name] = memory.peak_bytes
            else:
                call()
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(repeats):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}, peak_bytes


def kernel_benchmark(quick: bool = False) -> list[KernelResult]:
    """Explicit vs tiled vs fused attention, fp32, one result per sequence length T = S."""
    config = QUICK if quick else FULL
    results = []
    for length in config["lengths"]:
        set_seed(0)
        shape = (config["batch"], config["heads"], length, config["head_dim"])
        query, key, value = torch.randn(shape), torch.randn(shape), torch.randn(shape)
        calls = {
            "explicit": lambda q=query, k=key, v=value: scaled_dot_product_attention(q, k, v),
            "tiled": lambda q=query, k=key, v=value: tiled_attention(q, k, v),
            "sdpa": lambda q=query, k=key, v=value: F.scaled_dot_product_attention(q, k, v),
        }
        seconds, peak_bytes = time_interleaved(calls, config["repeats"], meter=True)
        results.append(KernelResult(length, seconds, peak_bytes))
    return results


def bare_attention(module: GroupedQueryAttention, x: Tensor) -> Tensor:
    """The module's forward pass as plain calls: projections, one fused SDPA, output projection."""
    batch, length, _ = x.shape
    n_heads, n_kv_heads, head_dim = module.n_heads, module.n_kv_heads, module.head_dim
    q = module.q_proj(x).view(batch, length, n_heads, head_dim).transpose(1, 2)  # (B, H, T, dh)
    k = module.k_proj(x).view(batch, length, n_kv_heads, head_dim).transpose(1, 2)
    v = module.v_proj(x).view(batch, length, n_kv_heads, head_dim).transpose(1, 2)
    heads = F.scaled_dot_product_attention(
        q, k, v, enable_gqa=n_kv_heads != n_heads
    )  # (B, H, T, d_head)
    return module.out_proj(heads.transpose(1, 2).reshape(batch, length, -1))  # (B, T, D)


def module_benchmark(quick: bool = False) -> list[ModuleResult]:
    """attnbook's MHA and GQA modules against bare SDPA and ``nn.MultiheadAttention``."""
    config = QUICK if quick else FULL
    d_model = config["heads"] * config["head_dim"]
    set_seed(0)
    mha = MultiHeadAttention(d_model, config["heads"]).eval()
    gqa = GroupedQueryAttention(d_model, config["heads"], KV_HEADS).eval()
    torch_mha = nn.MultiheadAttention(d_model, config["heads"], batch_first=True).eval()
    mha.copy_weights_from(torch_mha)
    results = []
    for length in config["lengths"]:
        x = torch.randn(config["batch"], length, d_model)  # (B, T, D)
        mha_calls = {
            "bare": lambda x=x: bare_attention(mha, x),
            "attnbook": lambda x=x: mha(x),
            "torch": lambda x=x: torch_mha(x, x, x, need_weights=False),
        }
        gqa_calls = {
            "bare": lambda x=x: bare_attention(gqa, x),
            "attnbook": lambda x=x: gqa(x),
        }
        for kind, calls in (("MHA", mha_calls), ("GQA", gqa_calls)):
            seconds, _ = time_interleaved(calls, config["repeats"])
            results.append(ModuleResult(length, kind, seconds))
    return results


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]


def memory_verdict(results: list[KernelResult]) -> tuple[int, float, bool | None]:
    """(T, tiled / explicit peak memory, met?) at the largest T measured; met is None (no
    verdict) when that T is not the target's ``MEMORY_TARGET_T``."""
    last = results[-1]
    ratio = last.peak_bytes["tiled"] / last.peak_bytes["explicit"]
    if last.length != MEMORY_TARGET_T:
        return last.length, ratio, None
    return last.length, ratio, ratio <= MEMORY_RATIO_TARGET


def module_verdict(results: list[ModuleResult]) -> tuple[float | None, bool | None]:
    """(worst attnbook / bare time ratio at T >= 1024, met?); with no such T, (None, None)."""
    ratios = [
        r.seconds["attnbook"] / r.seconds["bare"]
        for r in results
        if r.length >= MODULE_TARGET_MIN_T
    ]
    if not ratios:
        return None, None
    worst = max(ratios)
    return worst, worst <= MODULE_RATIO_TARGET


def format_kernels(results: list[KernelResult], quick: bool = False) -> str:
    """The kernel results as a text table plus the memory target's verdict."""
    config = QUICK if quick else FULL
    header = [
        "T",
        "explicit ms",
        "tiled ms",
        "SDPA ms",
        "tiled/expl",
        "SDPA/expl",
        "explicit MiB",
        "tiled MiB",
        "SDPA MiB",
        "tiled/expl mem",
    ]
    rows = []
    for r in results:
        ms = {name: 1000 * seconds for name, seconds in r.seconds.items()}
        mib = {name: size / MIB for name, size in r.peak_bytes.items()}
        rows.append(
            [
                str(r.length),
                f"{ms['explicit']:.1f}",
                f"{ms['tiled']:.1f}",
                f"{ms['sdpa']:.1f}",
                f"{ms['tiled'] / ms['explicit']:.2f}x",
                f"{ms['sdpa'] / ms['explicit']:.2f}x",
                f"{mib['explicit']:.1f}",
                f"{mib['tiled']:.1f}",
                f"{mib['sdpa']:.1f}",
                f"{r.peak_bytes['tiled'] / r.peak_bytes['explicit']:.3f}",
            ]
        )
    _, ratio, met = memory_verdict(results)
    title = (
        f"Attention kernels: B={config['batch']}, H={config['heads']}, "
        f"d_head={config['head_dim']}, T=S, fp32, no mask; median of {config['repeats']} "
        "after a warm-up; MiB = peak extra memory of one call (TensorMemoryMeter)"
    )
    outcome = (
        "not measured at this size"
        if met is None
        else f"{ratio:.3f} -> {'met' if met else 'NOT met'}"
    )
    verdict = (
        f"target: tiled peak extra memory at T = {MEMORY_TARGET_T} at most 1/8 of "
        f"explicit's: {outcome}"
    )
    return "\n".join([title, *_table(header, rows), verdict])


def format_modules(results: list[ModuleResult], quick: bool = False) -> str:
    """The module results as a text table plus the overhead target's verdict."""
    config = QUICK if quick else FULL
    header = [
        "T",
        "module",
        "bare SDPA ms",
        "attnbook ms",
        "attnbook/bare",
        "nn.MHA ms",
        "nn.MHA/bare",
    ]
    rows = []
    for r in results:
        bare, ours = r.seconds["bare"], r.seconds["attnbook"]
        torch_ms = f"{1000 * r.seconds['torch']:.1f}" if "torch" in r.seconds else "-"
        torch_ratio = f"{r.seconds['torch'] / bare:.2f}x" if "torch" in r.seconds else "-"
        rows.append(
            [
                str(r.length),
                r.kind,
                f"{1000 * bare:.1f}",
                f"{1000 * ours:.1f}",
                f"{ours / bare:.2f}x",
                torch_ms,
                torch_ratio,
            ]
        )
    worst, met = module_verdict(results)
    outcome = (
        "not measured at this size"
        if worst is None
        else f"worst {worst:.2f}x -> {'met' if met else 'NOT met'}"
    )
    d_model = config["heads"] * config["head_dim"]
    title = (
        f"Attention modules, need_weights=False: B={config['batch']}, D={d_model}, "
        f"H={config['heads']}, GQA H_kv={KV_HEADS}, self-attention, fp32; bare = the same "
        "projections around one F.scaled_dot_product_attention call"
    )
    verdict = (
        f"target: attnbook modules within {MODULE_RATIO_TARGET:g}x of bare SDPA at "
        f"T >= {MODULE_TARGET_MIN_T}: {outcome}"
    )
    return "\n".join([title, *_table(header, rows), verdict])
