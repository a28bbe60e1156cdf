"""RoPE as a rotation: a query and a key turned by their positions (chapter 7)."""

import math

from matplotlib.figure import Figure
from matplotlib.patches import Arc, Circle

from attnbook.book.diagrams._draw import BLACK, BLUE, ORANGE, arrow, canvas, label
from attnbook.core._checks import check_int

__all__ = ["rope_rotation"]

GREY = "#999999"  # q and k before rotation


def _angle_arc(ax, centre, radius, start, end, color, text, text_radius):
    """An arc from angle ``start`` to ``end`` (radians) with ``text`` at its middle."""
    low, high = sorted((start, end))
    ax.add_patch(
        Arc(
            centre,
            2 * radius,
            2 * radius,
            theta1=math.degrees(low),
            theta2=math.degrees(high),
            color=color,
            linewidth=1.2,
        )
    )
    middle = (low + high) / 2
    spot = (centre[0] + text_radius * math.cos(middle), centre[1] + text_radius * math.sin(middle))
    label(ax, spot, text, fontsize=10, color=color)


def _panel(ax, centre, m, n, theta, q_angle, k_angle):
    """One pair of features: q at position m and k at position n, after rotation."""
    radius = 1.6
    ax.add_patch(Circle(centre, radius, fill=False, color="#bbbbbb", linewidth=0.8))
    for angle, length, color, name, position in (
        (q_angle, 1.45, BLUE, "q", m),
        (k_angle, 1.15, ORANGE, "k", n),
    ):
        base = (centre[0] + length * math.cos(angle), centre[1] + length * math.sin(angle))
        arrow(ax, centre, base, color=GREY)
        beside = (
            centre[0] + (length + 0.2) * math.cos(angle),
            centre[1] + (length + 0.2) * math.sin(angle),
        )
        label(ax, beside, name, fontsize=10, color=GREY)
        turned = angle + position * theta
        tip = (centre[0] + length * math.cos(turned), centre[1] + length * math.sin(turned))
        arrow(ax, centre, tip, color=color)
        end = (
            centre[0] + (length + 0.3) * math.cos(turned),
            centre[1] + (length + 0.3) * math.sin(turned),
        )
        label(ax, end, f"R{position} {name}", fontsize=10, color=color)
    _angle_arc(ax, centre, 0.3, k_angle, q_angle, GREY, "φ", 0.45)
    q_turned, k_turned = q_angle + m * theta, k_angle + n * theta
    _angle_arc(ax, centre, 0.55, k_turned, q_turned, BLACK, f"φ + {m - n}θ", 0.95)
    label(ax, (centre[0], centre[1] - radius - 0.45), f"query at m = {m}, key at n = {n}")


def rope_rotation(*, theta: float = math.radians(25), shift: int = 3) -> Figure:
    """One feature pair of a query and a key, rotated at two pairs of positions.

    Grey: q and k before rotation (the same in both panels), labelled, with the angle φ
    between them marked. Coloured: the query turned by
    m·θ and the key by n·θ. The right panel moves both positions by ``shift``: both vectors
    turn further, and the angle between them, hence their dot product, stays the same.
    """
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not math.isfinite(theta):
        raise ValueError(f"theta: expected a finite angle in radians, got {theta!r}")
    check_int("shift", shift, low=0)
    ax = canvas(10, 5)
    q_angle, k_angle = math.radians(40), math.radians(0)
    _panel(ax, (2.5, 2.7), 2, 1, theta, q_angle, k_angle)
    _panel(ax, (7.5, 2.7), 2 + shift, 1 + shift, theta, q_angle, k_angle)
    label(
        ax,
        (5.0, 4.85),
        f"grey: q and k before rotation, φ apart; θ = {math.degrees(theta):.0f}°",
        fontsize=9,
    )
    return ax.figure
