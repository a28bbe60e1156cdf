"""The Triton FlashAttention kernels on a GPU: time and peak memory against SDPA and tiled.

:func:`triton_benchmark` times :func:`attnbook.triton_attention`, PyTorch's
``F.scaled_dot_product_attention`` (its flash backend where the GPU has one) and the library's
:func:`attnbook.tiled_attention`, causal, forward and forward + backward, at T = S = 1K to 16K,
d = 64 and 128, float16 and bfloat16, with CUDA events (median of ``repeats`` after a warm-up)
and ``torch.cuda.max_memory_allocated`` above the inputs. The plain-PyTorch tiled attention
runs only up to ``TILED_MAX_LENGTH``: its Python loop over tiles is slow at long lengths.

Target: the Triton kernels reach at least 0.7x SDPA's throughput (SDPA's time / Triton's) at
the longest length, forward and forward + backward. On a machine without CUDA the kernels run
in Triton's interpreter, where a timing means nothing: the section says it needs a GPU.
"""

import statistics

import torch
import torch.nn.functional as F

from attnbook.efficient.tiled import tiled_attention
from attnbook.kernels.attention import triton_attention

TARGET_SPEED = 0.7
FULL = {"lengths": (1024, 2048, 4096, 8192, 16384), "head_dims": (64, 128), "repeats": 10}
QUICK = {"lengths": (1024,), "head_dims": (64,), "repeats": 2}
BATCH, HEADS = 2, 8
DTYPES = (torch.float16, torch.bfloat16)
TILED_MAX_LENGTH = 4096
MIB = 2**20
IMPLEMENTATIONS = {
    "triton": lambda q, k, v: triton_attention(q, k, v, is_causal=True),
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "tiled": lambda q, k, v: tiled_attention(q, k, v, is_causal=True, block_q=128, block_k=128),
}


def _measure(attention, inputs, backward: bool, repeats: int) -> tuple[float, int]:
    """Median milliseconds of one call (with backward: forward + backward) and peak bytes."""

    def step():
        output = attention(*inputs)
        if backward:
            output.backward(torch.ones_like(output))

    step()  # warm-up: compiles the Triton kernels on their first call
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times), torch.cuda.max_memory_allocated() - base


def triton_benchmark(quick: bool = False) -> list[str]:
    """Table rows: dtype, d, T, then ms and MiB per implementation, forward and fwd + bwd."""
    config = QUICK if quick else FULL
    rows, verdicts = [], []
    for dtype in DTYPES:
        for head_dim in config["head_dims"]:
            for length in config["lengths"]:
                torch.manual_seed(0)
                shape = (BATCH, HEADS, length, head_dim)
                # (B, H, T, d_head)
                inputs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)]
                cells, ratio = [], {}
                for backward in (False, True):
                    for tensor in inputs:
                        tensor.requires_grad_(backward)
                        tensor.grad = None
                    ms = {}
                    for name, attention in IMPLEMENTATIONS.items():
                        if name == "tiled" and length > TILED_MAX_LENGTH:
                            cells.append("-")
                            continue
                        ms[name], peak = _measure(attention, inputs, backward, config["repeats"])
                        cells.append(f"{ms[name]:.2f} ms / {peak / MIB:.0f} MiB")
                    ratio[backward] = ms["sdpa"] / ms["triton"]
                rows.append(
                    f"{str(dtype)[6:]:8} d={head_dim:<3} T={length:<5} " + " | ".join(cells)
                )
                if length == config["lengths"][-1]:
                    verdicts.append(min(ratio.values()))
    worst = min(verdicts)
    met = "met" if worst >= TARGET_SPEED else "NOT met"
    rows.append(
        f"target: Triton >= {TARGET_SPEED}x SDPA's throughput at T = {config['lengths'][-1]}: "
        f"worst {worst:.2f}x, {met}"
    )
    return rows


def run(quick: bool = False) -> str:
    """The section's text: the table on CUDA, otherwise one line saying it needs a GPU."""
    title = "Triton FlashAttention kernels (causal; forward | forward + backward)"
    if not torch.cuda.is_available():
        return (
            f"{title}\nskipped: this section needs a CUDA GPU. Without one the kernels run in "
            "Triton's interpreter (chapter 16), which checks correctness but says nothing about "
            "speed."
        )
    header = "columns: triton, sdpa, tiled (forward), then the same with backward"
    return "\n".join([title, header, *triton_benchmark(quick)])
