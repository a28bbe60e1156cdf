"""Chapter 16's picture of a GPU run of the Triton bench section (:mod:`attnbook.bench.triton`).

:func:`plot_triton_run` draws two panels from the rows of
:func:`attnbook.bench.triton.read_shipped_run`, on log-log axes: the forward's time against T
for each implementation at one head width and dtype, and Triton's speed as a fraction of SDPA's
(SDPA's time over Triton's) against T, forward and forward + backward, at every head width,
with the target as a grey line.
"""

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attnbook.bench.triton import IMPLEMENTATIONS, MODES, TARGET_SPEED, speed_fraction

NAMES = {"triton": "Triton", "sdpa": "SDPA", "tiled": "tiled_attention"}
MODE_NAMES = {"forward": "forward", "backward": "fwd + bwd"}


def plot_triton_run(rows: list[dict], head_dim: int, dtype: str = "float16") -> Figure:
    """Left: forward milliseconds against T per implementation at ``head_dim`` and ``dtype``.
    Right: Triton / SDPA speed against T, forward (solid) and forward + backward (dashed),
    one colour per head width, with :data:`TARGET_SPEED` in grey."""
    mine = [row for row in rows if row["dtype"] == dtype]
    if not mine:
        dtypes = sorted({row["dtype"] for row in rows})
        raise ValueError(f"dtype: expected one of the rows' dtypes {dtypes}, got {dtype!r}")
    widths = sorted({row["head_dim"] for row in mine})
    if head_dim not in widths:
        raise ValueError(f"head_dim: expected one of the rows' widths {widths}, got {head_dim!r}")
    fig, (times, fractions) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    chosen = sorted((row for row in mine if row["head_dim"] == head_dim), key=lambda r: r["length"])
    for name in IMPLEMENTATIONS:
        points = [(r["length"], r["forward"][name][0]) for r in chosen if r["forward"][name]]
        lengths, ms = zip(*points, strict=True)
        times.plot(lengths, ms, marker="o", label=NAMES[name])
    times.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="forward time (ms)")
    times.set_title(f"forward, d = {head_dim}, {dtype}")
    times.legend(loc="lower right")
    for colour, width in zip(("C3", "C5"), widths, strict=False):
        by_length = sorted((r for r in mine if r["head_dim"] == width), key=lambda r: r["length"])
        lengths = [r["length"] for r in by_length]
        for mode, style in zip(MODES, ("-", "--"), strict=True):
            speed = [speed_fraction(r, mode) for r in by_length]
            label = f"d = {width}, {MODE_NAMES[mode]}"
            fractions.plot(lengths, speed, style, color=colour, marker="o", label=label)
    fractions.axhline(TARGET_SPEED, color="grey", linewidth=1)
    fractions.annotate(
        f"target {TARGET_SPEED}", (0.02, TARGET_SPEED), xycoords=("axes fraction", "data"),
        xytext=(0, 4), textcoords="offset points", color="grey", fontsize=9,
    )  # fmt: skip
    fractions.set(xscale="log", ylim=(0, 1), xlabel="sequence length T")
    fractions.set(ylabel="Triton / SDPA speed")
    fractions.set_title(f"Triton's speed as a fraction of SDPA's, {dtype}")
    fractions.legend(loc="upper right", fontsize=9, ncol=2)
    for ax in (times, fractions):
        lengths = sorted({r["length"] for r in mine})
        ax.set_xticks(lengths, [f"{n // 1024}K" for n in lengths])
        ax.minorticks_off()
    return fig
