"""Drawing primitives shared by the schematic diagrams: a canvas, boxes, arrows, labels.

Coordinates are in data units on an axes with its frame hidden, so a diagram is laid out on a
grid of its own choosing (for example 0..10 by 0..6) and scales with the figure. Colours come
from the book's Okabe-Ito palette (:data:`attnbook.book.plotting.OKABE_ITO`).
"""

from matplotlib import pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.book.plotting import OKABE_ITO

BLUE, ORANGE, GREEN, RED, SKY, PINK, YELLOW, BLACK = OKABE_ITO
LIGHT = "#f2f2f2"


def canvas(width: float, height: float, *, inches_per_unit: float = 0.8) -> Axes:
    """A frameless axes spanning (0, width) x (0, height), origin bottom-left."""
    figure, ax = plt.subplots(
        figsize=(width * inches_per_unit, height * inches_per_unit), layout="constrained"
    )
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def box(
    ax: Axes,
    x: float,
    y: float,
    width: float,
    height: float,
    text: str = "",
    *,
    color: str = LIGHT,
    text_color: str = BLACK,
    fontsize: float = 10,
) -> FancyBboxPatch:
    """A rounded box with its bottom-left corner at (x, y) and ``text`` centred in it."""
    patch = FancyBboxPatch(
        (x, y),
        width,
        height,
        boxstyle="round,pad=0.02,rounding_size=0.08",
        facecolor=color,
        edgecolor=BLACK,
        linewidth=1.0,
    )
    ax.add_patch(patch)
    if text:
        ax.text(
            x + width / 2,
            y + height / 2,
            text,
            ha="center",
            va="center",
            color=text_color,
            fontsize=fontsize,
        )
    return patch


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    text: str = "",
    *,
    color: str = BLACK,
    style: str = "-|>",
    curve: float = 0.0,
    fontsize: float = 9,
) -> FancyArrowPatch:
    """An arrow from ``start`` to ``end``, optionally curved, with ``text`` at its middle."""
    patch = FancyArrowPatch(
        start,
        end,
        arrowstyle=style,
        mutation_scale=12,
        color=color,
        linewidth=1.2,
        connectionstyle=f"arc3,rad={curve}",
    )
    ax.add_patch(patch)
    if text:
        middle = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        label(ax, middle, text, fontsize=fontsize, background=True)
    return patch


def label(
    ax: Axes,
    xy: tuple[float, float],
    text: str,
    *,
    fontsize: float = 10,
    color: str = BLACK,
    ha: str = "center",
    background: bool = False,
) -> None:
    """Text at ``xy``; with ``background`` it sits on a white patch, readable over lines."""
    style = {"facecolor": "white", "edgecolor": "none", "pad": 1.0} if background else None
    ax.text(*xy, text, ha=ha, va="center", fontsize=fontsize, color=color, bbox=style)
