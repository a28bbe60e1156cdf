"""Ring attention on P CPU processes: per-rank peak memory and time against P.

For each P, one :func:`attnbook.efficient.launcher.launch` runs :func:`rank_benchmark` on every
rank: the rank's shards of the same (B, H, T, d_head) inputs, one warm-up call of
:func:`attnbook.efficient.ring.ring_attention` under :class:`attnbook.TensorMemoryMeter` (its peak
extra bytes), then ``repeats`` timed calls, each started together on every rank (a barrier); the
median is kept and the slowest rank's is reported (the ring ends when its last rank does).
Against it: the library's explicit attention on one process over the whole sequence.

Training: one forward and backward pass of each (gradients included) under the meter too, the
ring's backward being its second trip around the ring.

Targets: peak memory per rank at most 1/P of the single-process explicit version plus one block
(one key shard and one value shard, 2 B H (S/P) d_head elements), for the forward pass and for
forward + backward. Printed with verdicts; nothing here asserts them.
"""

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from attnbook.core.attention import scaled_dot_product_attention
from attnbook.core.device import set_seed
from attnbook.core.memory import TensorMemoryMeter
from attnbook.efficient.launcher import launch
from attnbook.efficient.ring import ring_attention
from attnbook.efficient.sharding import shard_sequence

MIB = 2**20
FULL = {"world_sizes": (1, 2, 4), "heads": 8, "length": 2048, "head_dim": 64, "repeats": 3}
QUICK = {"world_sizes": (1, 2), "heads": 2, "length": 128, "head_dim": 16, "repeats": 1}
BATCH = 1


@dataclass(frozen=True)
class RingResult:
    """One P: the largest per-rank peak extra bytes (forward; forward + backward) and the
    slowest rank's median seconds (forward)."""

    world_size: int
    peak_bytes: int
    seconds: float
    block_bytes: int
    training_peak_bytes: int


def training_peak(attention, *inputs: Tensor) -> int:
    """Peak extra bytes of one forward and backward pass of ``attention`` on copies of inputs
    that require gradients (the gradients included)."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    with TensorMemoryMeter() as meter:
        attention(*leaves).sum().backward()
    return meter.peak_bytes


def rank_benchmark(
    query: Tensor, key: Tensor, value: Tensor, repeats: int
) -> tuple[int, float, int]:
    """Worker: this rank's (peak extra bytes, median seconds, forward + backward peak extra
    bytes) of non-causal ring attention."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shards = [shard_sequence(t, rank, world_size) for t in (query, key, value)]  # (B, H, T/P, d)
    with torch.inference_mode():
        with TensorMemoryMeter() as meter:
            ring_attention(*shards)
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            ring_attention(*shards)
            times.append(time.perf_counter() - start)
    return meter.peak_bytes, statistics.median(times), training_peak(ring_attention, *shards)


def explicit_benchmark(query: Tensor, key: Tensor, value: Tensor, repeats: int) -> RingResult:
    """The single-process explicit attention: peak extra bytes and median seconds, as P = 0."""
    with torch.inference_mode():
        with TensorMemoryMeter() as meter:
            scaled_dot_product_attention(query, key, value)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            scaled_dot_product_attention(query, key, value)
            times.append(time.perf_counter() - start)
    training = training_peak(lambda *t: scaled_dot_product_attention(*t)[0], query, key, value)
    return RingResult(0, meter.peak_bytes, statistics.median(times), 0, training)


def ring_benchmark(quick: bool = False) -> tuple[RingResult, list[RingResult]]:
    """The explicit baseline and one :class:`RingResult` per P of the configuration."""
    config = QUICK if quick else FULL
    set_seed(0)
    shape = (BATCH, config["heads"], config["length"], config["head_dim"])
    query, key, value = (torch.randn(shape) for _ in range(3))  # (B, H, T, d_head)
    explicit = explicit_benchmark(query, key, value, config["repeats"])
    results = []
    for world_size in config["world_sizes"]:
        per_rank = launch(rank_benchmark, world_size, query, key, value, config["repeats"])
        block = 2 * key.numel() // world_size * key.element_size()  # one key + value shard
        peak = max(peak for peak, _, _ in per_rank)
        seconds = max(seconds for _, seconds, _ in per_rank)
        training = max(training for _, _, training in per_rank)
        results.append(RingResult(world_size, peak, seconds, block, training))
    return explicit, results


def memory_verdict(
    explicit: RingResult, results: list[RingResult], training: bool = False
) -> tuple[float, bool]:
    """The worst peak / (explicit / P + one block) over P, and whether it is at most 1; with
    ``training``, of the forward + backward peaks."""

    def peak(r: RingResult) -> int:
        return r.training_peak_bytes if training else r.peak_bytes

    ratios = [peak(r) / (peak(explicit) / r.world_size + r.block_bytes) for r in results]
    return max(ratios), max(ratios) <= 1.0


def format_ring(explicit: RingResult, results: list[RingResult], quick: bool = False) -> str:
    """The results as a text table plus the memory target's verdict."""
    config = QUICK if quick else FULL
    header = [
        "run",
        "ms (slowest rank)",
        "peak MiB per rank",
        "explicit/P + block MiB",
        "ratio",
        "fwd+bwd peak MiB",
        "explicit fwd+bwd/P + block MiB",
        "fwd+bwd ratio",
    ]
    explicit_ms, explicit_mib = 1000 * explicit.seconds, explicit.peak_bytes / MIB
    explicit_training_mib = explicit.training_peak_bytes / MIB
    rows = [
        [
            "1 process, explicit",
            f"{explicit_ms:.1f}",
            f"{explicit_mib:.2f}",
            "",
            "",
            f"{explicit_training_mib:.2f}",
            "",
            "",
        ]
    ]
    for r in results:
        budget = explicit.peak_bytes / r.world_size + r.block_bytes
        training_budget = explicit.training_peak_bytes / r.world_size + r.block_bytes
        rows.append(
            [
                f"{r.world_size} ranks, ring",
                f"{1000 * r.seconds:.1f}",
                f"{r.peak_bytes / MIB:.2f}",
                f"{budget / MIB:.2f}",
                f"{r.peak_bytes / budget:.3f}",
                f"{r.training_peak_bytes / MIB:.2f}",
                f"{training_budget / MIB:.2f}",
                f"{r.training_peak_bytes / training_budget:.3f}",
            ]
        )
    worst, met = memory_verdict(explicit, results)
    training_worst, training_met = memory_verdict(explicit, results, training=True)
    title = (
        f"Ring attention on CPU processes: B={BATCH}, H={config['heads']}, "
        f"T=S={config['length']}, d_head={config['head_dim']}, fp32, no mask; median of "
        f"{config['repeats']} after a warm-up; MiB = peak extra memory (TensorMemoryMeter)"
    )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    table = [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    verdict = (
        f"target: peak memory per rank <= 1/P of the single-process explicit version + one "
        f"block: worst ratio {worst:.3f} -> {'met' if met else 'NOT met'}"
    )
    training_verdict = (
        f"target: forward + backward peak memory per rank <= 1/P of the explicit version's + "
        f"one block: worst ratio {training_worst:.3f} -> {'met' if training_met else 'NOT met'}"
    )
    return "\n".join([title, *table, verdict, training_verdict])


def run(quick: bool = False) -> str:
    """Run the ring benchmark and return its table."""
    return format_ring(*ring_benchmark(quick), quick)
