"""Attention for training: forward + backward time and peak memory, tiled against explicit.

:func:`training_benchmark` runs one causal forward and backward pass of the library's explicit
attention and of :func:`attnbook.tiled_attention` on (B, H, T, d_head) inputs that require
gradients, at each T of the configuration: peak extra bytes from :class:`attnbook.
TensorMemoryMeter` over the whole step (the gradients included), median seconds of
``repeats`` interleaved rounds after the metered warm-up.

Target: tiled's peak extra memory at T = 4096 at most 1/8 of explicit's, as in the forward
table. Printed with a verdict; nothing here asserts it.
"""

import statistics
import time
from dataclasses import dataclass

import torch

from attnbook.core.attention import scaled_dot_product_attention
from attnbook.core.device import set_seed
from attnbook.core.memory import TensorMemoryMeter
from attnbook.efficient.tiled import tiled_attention

MIB = 2**20
MEMORY_RATIO_TARGET = 1 / 8
TARGET_LENGTH = 4096
FULL = {"lengths": (1024, 2048, 4096), "batch": 1, "heads": 4, "head_dim": 64, "repeats": 3}
QUICK = {"lengths": (64, 128), "batch": 1, "heads": 2, "head_dim": 16, "repeats": 1}


@dataclass(frozen=True)
class TrainingResult:
    """Median seconds and peak extra bytes of one forward + backward, per implementation."""

    length: int
    seconds: dict[str, float]
    peak_bytes: dict[str, int]


def _step(attention, query, key, value) -> None:
    """One causal forward and backward pass; the gradients land in .grad."""
    for tensor in (query, key, value):
        tensor.grad = None
    attention(query, key, value).sum().backward()


IMPLEMENTATIONS = {
    "explicit": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0],
    "tiled": lambda q, k, v: tiled_attention(q, k, v, is_causal=True),
}


def training_benchmark(quick: bool = False) -> list[TrainingResult]:
    """Explicit vs tiled forward + backward, fp32, causal, one result per T = S."""
    config = QUICK if quick else FULL
    results = []
    for length in config["lengths"]:
        set_seed(0)
        shape = (config["batch"], config["heads"], length, config["head_dim"])
        inputs = [torch.randn(shape, requires_grad=True) for _ in range(3)]  # (B, H, T, d_head)
        peak_bytes, times = {}, {name: [] for name in IMPLEMENTATIONS}
        for name, attention in IMPLEMENTATIONS.items():
            with TensorMemoryMeter() as meter:
                _step(attention, *inputs)
            peak_bytes[name] = meter.peak_bytes
        for _ in range(config["repeats"]):
            for name, attention in IMPLEMENTATIONS.items():
                start = time.perf_counter()
                _step(attention, *inputs)
                times[name].append(time.perf_counter() - start)
        seconds = {name: statistics.median(values) for name, values in times.items()}
        results.append(TrainingResult(length, seconds, peak_bytes))
    return results


def memory_verdict(results: list[TrainingResult]) -> tuple[float | None, bool | None]:
    """(tiled / explicit peak memory at T = 4096, met?), or (None, None) if 4096 was not run."""
    at_target = [r for r in results if r.length == TARGET_LENGTH]
    if not at_target:
        return None, None
    ratio = at_target[0].peak_bytes["tiled"] / at_target[0].peak_bytes["explicit"]
    return ratio, ratio <= MEMORY_RATIO_TARGET


def format_training(results: list[TrainingResult], quick: bool = False) -> str:
    """The results as a text table plus the memory target's verdict."""
    config = QUICK if quick else FULL
    header = ["T", "explicit ms", "tiled ms", "explicit MiB", "tiled MiB", "tiled/expl mem"]
    rows = [
        [
            str(r.length),
            f"{1000 * r.seconds['explicit']:.1f}",
            f"{1000 * r.seconds['tiled']:.1f}",
            f"{r.peak_bytes['explicit'] / MIB:.1f}",
            f"{r.peak_bytes['tiled'] / MIB:.1f}",
            f"{r.peak_bytes['tiled'] / r.peak_bytes['explicit']:.3f}",
        ]
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    table = [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    ratio, met = memory_verdict(results)
    outcome = (
        "not measured at this size"
        if ratio is None
        else f"{ratio:.3f} -> {'met' if met else 'NOT met'}"
    )
    title = (
        f"Attention for training (forward + backward): B={config['batch']}, "
        f"H={config['heads']}, d_head={config['head_dim']}, T=S, fp32, causal; median of "
        f"{config['repeats']} after a warm-up; MiB = peak extra memory of one step, gradients "
        "included (TensorMemoryMeter)"
    )
    verdict = (
        f"target: tiled peak extra memory (forward + backward) at T = {TARGET_LENGTH} at most "
        f"1/8 of explicit's: {outcome}"
    )
    return "\n".join([title, *table, verdict])


def run(quick: bool = False) -> str:
    """Run the training benchmark and return its table."""
    return format_training(training_benchmark(quick), quick)
