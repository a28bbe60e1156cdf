"""The Triton FlashAttention kernels on a GPU: time and peak memory against SDPA and tiled.

:func:`triton_benchmark` times :func:`attnbook.triton_attention`, PyTorch's
``F.scaled_dot_product_attention`` (whichever fused kernel its dispatch picks; not recorded)
and the library's :func:`attnbook.tiled_attention`, causal, forward and forward + backward, at
T = S = 1K to 16K, d = 64 and 128, float16 and bfloat16, with CUDA events (median of
``repeats`` after a warm-up) and ``torch.cuda.max_memory_allocated`` above the inputs. The
plain-PyTorch tiled attention runs only up to ``TILED_MAX_LENGTH``: its Python loop over tiles
is slow at long lengths.

Target: the Triton kernels reach at least 0.7x SDPA's throughput (SDPA's time / Triton's) at
the longest length, forward and forward + backward. On a machine without CUDA the kernels run
in Triton's interpreter, where a timing means nothing: the section says it needs a GPU.

One run on a GPU ships with the book, ``data/triton_bench_h200.txt`` (its header says on what
machine and software); :func:`read_shipped_run` parses it back into measurements, for chapter
16 and the tests, with :func:`parse_row`, the inverse of :func:`format_row`;
:func:`speed_fraction`, :func:`forward_tflops` and :func:`backward_tflops` read a parsed row.
"""

import re
import statistics
from importlib.resources import files

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
                            cells.append(None)
                            continue
                        ms[name], peak = _measure(attention, inputs, backward, config["repeats"])
                        cells.append((ms[name], peak / MIB))
                    ratio[backward] = ms["sdpa"] / ms["triton"]
                rows.append(format_row(str(dtype)[6:], head_dim, length, cells))
                if length == config["lengths"][-1]:
                    verdicts.append(min(ratio.values()))
    worst = min(verdicts)
    met = "met" if worst >= TARGET_SPEED else "NOT met"
    rows.append(
        f"target: Triton >= {TARGET_SPEED}x SDPA's throughput at T = {config['lengths'][-1]}: "
        f"worst {worst:.2f}x, {met}"
    )
    return rows


def format_row(
    dtype: str, head_dim: int, length: int, cells: list[tuple[float, float] | None]
) -> str:
    """One table row: ``cells`` are (ms, MiB) per implementation, forward then with backward,
    in :data:`IMPLEMENTATIONS`' order; None where an implementation did not run ("-")."""
    text = ["-" if cell is None else f"{cell[0]:.3f} ms / {cell[1]:.0f} MiB" for cell in cells]
    return f"{dtype:8} d={head_dim:<3} T={length:<5} " + " | ".join(text)


_ROW = re.compile(r"(?P<dtype>\w+)\s+d=(?P<head_dim>\d+)\s+T=(?P<length>\d+)\s+(?P<cells>.+)")
_CELL = re.compile(r"(?P<ms>[\d.]+) ms / (?P<mib>\d+) MiB")


def parse_row(row: str) -> dict:
    """A row of :func:`format_row` back as a dict: dtype, head_dim, length, and "forward" and
    "backward", each {implementation: (ms, MiB) or None}. Raises ValueError for other text."""
    match = _ROW.fullmatch(row.strip())
    texts = match["cells"].split(" | ") if match else []
    if len(texts) != 2 * len(IMPLEMENTATIONS):
        raise ValueError(f"row: expected a row of the Triton bench table, got {row!r}")
    cells = []
    for text in texts:
        cell = _CELL.fullmatch(text.strip())
        if cell is None and text.strip() != "-":
            raise ValueError(f"row: expected 'ms / MiB' or '-' in each cell, got {text!r}")
        cells.append((float(cell["ms"]), float(cell["mib"])) if cell else None)
    n = len(IMPLEMENTATIONS)
    return {
        "dtype": match["dtype"],
        "head_dim": int(match["head_dim"]),
        "length": int(match["length"]),
        "forward": dict(zip(IMPLEMENTATIONS, cells[:n], strict=True)),
        "backward": dict(zip(IMPLEMENTATIONS, cells[n:], strict=True)),
    }


MODES = ("forward", "backward")


def speed_fraction(row: dict, mode: str) -> float:
    """Triton's throughput as a fraction of SDPA's in a row of :func:`parse_row`: SDPA's time
    over Triton's, for ``mode`` "forward" or "backward" (forward + backward)."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    times = row[mode]
    return times["sdpa"][0] / times["triton"][0]


def _check_timed(row: dict, name: str) -> None:
    timed = [key for key, cell in row["forward"].items() if cell is not None]
    if name not in timed:
        raise ValueError(
            f"name: expected an implementation timed in this row, {timed}, got {name!r}"
        )


def _forward_flops(row: dict) -> float:
    """BATCH * HEADS * T^2 / 2 visible scores, 2d operations each in Q K^T and as many in A V."""
    return BATCH * HEADS * row["length"] ** 2 / 2 * 4 * row["head_dim"]


def forward_tflops(row: dict, name: str) -> float:
    """The causal forward's rate, in TFLOP/s, of implementation ``name`` in a row of
    :func:`parse_row`: its two matrix products on the visible half of the scores, over the
    row's forward time."""
    _check_timed(row, name)
    return _forward_flops(row) / row["forward"][name][0] / 1e9  # ms -> TFLOP/s


def backward_tflops(row: dict, name: str, products: int) -> float:
    """The backward pass's rate alone, in TFLOP/s, of implementation ``name`` in a row of
    :func:`parse_row`, counting ``products`` matrix products per tile where the forward has 2
    (Triton's three kernels do 7, FlashAttention-2's backward 5). Its time is the row's
    forward + backward less its forward: it includes making dO and the delta kernel."""
    _check_timed(row, name)
    if isinstance(products, bool) or not isinstance(products, int) or products < 1:
        raise ValueError(f"products: expected a positive int, got {products!r}")
    ms = row["backward"][name][0] - row["forward"][name][0]
    if ms <= 0:
        raise ValueError(f"row: expected forward + backward slower than forward, got {ms} ms")
    return _forward_flops(row) * products / 2 / ms / 1e9


SHIPPED_RUN = "triton_bench_h200.txt"


def read_shipped_run() -> tuple[list[str], list[dict]]:
    """The GPU run shipped in ``data/``: its header lines (without "# ") and its parsed rows."""
    lines = (files("attnbook.data") / SHIPPED_RUN).read_text().splitlines()
    header = [line[2:] for line in lines if line.startswith("# ")]
    rows = [parse_row(line) for line in lines if _ROW.fullmatch(line.strip())]
    return header, rows


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
