"""Chapter 10's pictures: the ring step by step, and a compute/transfer timeline per rank."""

import math
from dataclasses import dataclass

from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from attnbook.book.diagrams._draw import (
    BLACK,
    BLUE,
    GREEN,
    ORANGE,
    PINK,
    arrow,
    box,
    canvas,
    label,
)
from attnbook.core._checks import check_bool, check_choice, check_int, check_positive
from attnbook.efficient.sharding import LAYOUTS, step_work

SHARD_COLORS = (BLUE, ORANGE, GREEN, PINK)


def _on_circle(cx: float, cy: float, radius: float, slot: float, slots: int) -> tuple[float, float]:
    """The point of a circle at ``slot`` of ``slots`` (0 at the top, clockwise)."""
    angle = math.pi / 2 - 2 * math.pi * slot / slots
    return cx + radius * math.cos(angle), cy + radius * math.sin(angle)


def ring_steps(*, world_size: int = 4) -> Figure:
    """One panel per ring step: P ranks in a circle, each keeping its query shard Q_r.

    At step s rank r holds the key/value shard of rank (r - s) mod P, drawn in that rank's
    colour beside its queries; arrows show the shard moving on to rank r + 1 for the next
    step. After P steps every query shard has met every key/value shard once.
    """
    check_int("world_size", world_size, low=2, high=len(SHARD_COLORS))
    panel, radius = 4.4, 1.35
    ax = canvas(panel * world_size, panel + 0.6, inches_per_unit=0.55)
    for step in range(world_size):
        cx, cy = panel * step + panel / 2, panel / 2
        label(ax, (cx, panel + 0.25), f"step {step}", fontsize=11)
        for rank in range(world_size):
            x, y = _on_circle(cx, cy, radius, rank, world_size)
            source = (rank - step) % world_size
            box(ax, x - 0.62, y - 0.3, 0.58, 0.6, f"Q{rank}", color="white", fontsize=9)
            box(
                ax,
                x + 0.04,
                y - 0.3,
                0.7,
                0.6,
                f"KV{source}",
                color=SHARD_COLORS[source],
                text_color="white",
                fontsize=9,
            )
            if step < world_size - 1:
                arrow(
                    ax,
                    _on_circle(cx, cy, 0.62 * radius, rank + 0.2, world_size),
                    _on_circle(cx, cy, 0.62 * radius, rank + 0.8, world_size),
                    color=SHARD_COLORS[source],
                    curve=-0.35,
                )
        label(ax, (cx, cy), "send on" if step < world_size - 1 else "all met", fontsize=8)
    return ax.figure


@dataclass(frozen=True)
class RingSchedule:
    """When each rank computes and receives, step by step, in a model of the ring's timing.

    Times are in units of computing one full (T/P, S/P) block of scores. ``work[r][s]``: how
    long rank r computes at step s (:func:`attnbook.efficient.sharding.step_work`);
    ``starts[r][s]``: when that step starts; ``arrivals[r][s]``: (begin, end) of the transfer
    that brings rank r the shard of step s + 1 (None at the last step); ``finish[r]``: when
    rank r's last computation ends.
    """

    work: list[list[float]]
    starts: list[list[float]]
    arrivals: list[list[tuple[float, float] | None]]
    finish: list[float]


def ring_schedule(
    *,
    world_size: int = 4,
    layout: str = "contiguous",
    is_causal: bool = True,
    transfer: float = 0.4,
) -> RingSchedule:
    """The timing of one forward ring if compute and transfer overlap as in ``ring_attention``.

    At the start of step s every rank posts the send of the shard it holds to rank r + 1 and the
    receive of the next one from rank r - 1; a transfer runs once both ends have posted and
    takes ``transfer`` (one shard, in units of one block's compute). The rank computes its
    share of the step meanwhile, then waits for both transfers before step s + 1. A rank with
    little work therefore waits for its neighbours: the ring runs at the pace of the slowest.
    """
    check_int("world_size", world_size, low=2)
    check_choice("layout", layout, LAYOUTS)
    check_bool("is_causal", is_causal)
    check_positive("transfer", transfer)
    P, work = world_size, step_work(world_size, layout, is_causal)
    starts = [[0.0] * P for _ in range(P)]
    arrivals: list[list[tuple[float, float] | None]] = [[None] * P for _ in range(P)]
    for step in range(P - 1):
        for rank in range(P):
            begin = max(starts[(rank - 1) % P][step], starts[rank][step])
            arrivals[rank][step] = (begin, begin + transfer)  # from rank - 1 into rank
        for rank in range(P):
            computed = starts[rank][step] + work[rank][step]
            received = arrivals[rank][step][1]
            sent = arrivals[(rank + 1) % P][step][1]  # its own send, into rank + 1
            starts[rank][step + 1] = max(computed, received, sent)
    finish = [starts[rank][P - 1] + work[rank][P - 1] for rank in range(P)]
    return RingSchedule(work, starts, arrivals, finish)


def ring_timeline(
    *,
    world_size: int = 4,
    layouts: tuple[str, ...] = ("contiguous", "zigzag"),
    transfer: float = 0.4,
) -> Figure:
    """Causal ring attention per rank over time, one panel per layout (:func:`ring_schedule`).

    Each rank's row has an upper bar for the computation on the key/value shard it holds at
    that step (labelled and coloured by its owner, as in :func:`ring_steps`) and a lower, pale
    bar for the next shard arriving from rank r - 1 during that computation. A dashed line
    marks when the last rank finishes. In the contiguous layout the early ranks have little or
    nothing to compute and wait; in the zigzag layout every rank's steps are alike.
    """
    check_int("world_size", world_size, low=2, high=len(SHARD_COLORS))
    if not isinstance(layouts, tuple) or not layouts:
        raise ValueError(f"layouts: expected a non-empty tuple of layouts, got {layouts!r}")
    for layout in layouts:
        check_choice("layouts", layout, LAYOUTS)
    check_positive("transfer", transfer)
    P = world_size
    figure, axes = plt.subplots(
        len(layouts), 1, figsize=(8.4, 0.9 + 0.55 * P * len(layouts)), sharex=True,
        layout="constrained", squeeze=False,
    )  # fmt: skip
    plans = [ring_schedule(world_size=P, layout=layout, transfer=transfer) for layout in layouts]
    longest = max(max(plan.finish) for plan in plans)
    for ax, layout, plan in zip(axes[:, 0], layouts, plans, strict=True):
        for rank in range(P):
            for step in range(P):
                source, start = (rank - step) % P, plan.starts[rank][step]
                if plan.work[rank][step] > 0:
                    _bar(ax, start, rank - 0.42, plan.work[rank][step], 0.46, source, 1.0)
                if plan.arrivals[rank][step] is not None:
                    begin, end = plan.arrivals[rank][step]
                    _bar(ax, begin, rank + 0.1, end - begin, 0.3, (source - 1) % P, 0.35)
        done = max(plan.finish)
        ax.axvline(done, color=BLACK, linestyle="--", linewidth=1.0)
        ax.text(done + 0.04, -0.55, f"done at {done:.2f}", fontsize=8, va="center")
        ax.set_yticks(range(P), [f"rank {r}" for r in range(P)])
        ax.set_xlim(0, longest + 0.5)
        ax.set_ylim(P - 0.45, -0.8)
        ax.set_title(f"{layout} layout, causal, P = {P}", fontsize=10)
    handles = [
        Patch(facecolor=BLUE, label="upper bar: computing on the shard held (KV<owner>)"),
        Patch(facecolor=BLUE, alpha=0.35, label="lower bar: the next shard arriving"),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    axes[-1, 0].set_xlabel(
        f"time, in units of computing one full (T/P, S/P) block; one transfer = {transfer:g}"
    )
    return figure


def _bar(ax, x: float, y: float, width: float, height: float, source: int, alpha: float) -> None:
    """A bar of the timeline, coloured by the shard's owner and labelled KV<owner>."""
    color = SHARD_COLORS[source]
    ax.add_patch(
        Rectangle((x, y), width, height, facecolor=color, edgecolor=BLACK, linewidth=0.6,
                  alpha=alpha)
    )  # fmt: skip
    text_color = "white" if alpha == 1.0 else BLACK
    ax.text(x + width / 2, y + height / 2, f"KV{source}", ha="center", va="center",
            fontsize=7, color=text_color)  # fmt: skip
