"""Data-flow schematics with the shape of each step: attention itself (chapter 0) and
single-head self-attention with its projections (chapter 3)."""

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, GREEN, LIGHT, ORANGE, SKY, YELLOW, arrow, box, canvas
from attnbook.core._checks import check_int


def self_attention_dataflow(*, T: int = 6, D: int = 16, d_head: int = 8) -> Figure:
    """x -> W_q, W_k, W_v -> Q, K, V -> scores -> softmax -> weighted sum, shapes written in.

    The shapes are given in the book's notation and, for the chapter's example, in numbers
    (``T`` tokens of width ``D``, one head of width ``d_head``; S = T keys).
    """
    check_int("T", T)
    check_int("D", D)
    check_int("d_head", d_head)
    ax = canvas(14.0, 5.2, inches_per_unit=0.62)
    box(ax, 0.2, 2.1, 1.7, 1.0, f"x\n(T, D) = ({T}, {D})", color=LIGHT, fontsize=9)
    rows = [("Q", "T", 3.8, "$W_q$", BLUE), ("K", "S", 2.1, "$W_k$", ORANGE)]
    rows.append(("V", "S", 0.4, "$W_v$", GREEN))
    for name, axis, y, weight, color in rows:
        text = f"{name}\n({axis}, d_head) = ({T}, {d_head})"
        box(ax, 3.3, y, 2.3, 1.0, text, color=color, text_color="white", fontsize=9)
        arrow(ax, (1.9, 2.6), (3.3, y + 0.5), weight)
    scores = "scores\n$QK^\\top / \\sqrt{d_{head}}$\n" + f"(T, S) = ({T}, {T})"
    box(ax, 6.6, 2.9, 2.2, 1.3, scores, color=SKY, fontsize=9)
    arrow(ax, (5.6, 4.3), (6.6, 3.8))
    arrow(ax, (5.6, 2.6), (6.6, 3.2))
    weights = f"weights: softmax\nover the keys\n(T, S) = ({T}, {T})"
    box(ax, 9.4, 2.9, 2.3, 1.3, weights, color=YELLOW, fontsize=9)
    arrow(ax, (8.8, 3.55), (9.4, 3.55))
    output = f"weighted sum\nweights @ V\n(T, d_head) = ({T}, {d_head})"
    box(ax, 11.7, 0.9, 2.1, 1.3, output, color=LIGHT, fontsize=9)
    arrow(ax, (10.55, 2.9), (12.5, 2.2))
    arrow(ax, (5.6, 0.9), (11.7, 1.3))
    return ax.figure


def attention_shapes(*, T: int = 6, S: int = 6, d: int = 8, d_v: int = 1) -> Figure:
    """Chapter 0's schematic: Q, K, V -> scores -> weights -> attended, each with its shape.

    The three steps carry the names ``trace_shapes`` records (scores, weights, attended), so the
    picture and the chapter's shape trace read the same way.
    """
    for name, value in [("T", T), ("S", S), ("d", d), ("d_v", d_v)]:
        check_int(name, value)
    ax = canvas(13.6, 4.6, inches_per_unit=0.62)
    inputs = [("Q", f"(T, d) = ({T}, {d})", 3.3, BLUE), ("K", f"(S, d) = ({S}, {d})", 1.9, ORANGE)]
    inputs.append(("V", f"(S, d_v) = ({S}, {d_v})", 0.2, GREEN))
    for name, shape, y, color in inputs:
        box(ax, 0.2, y, 2.2, 1.0, f"{name}\n{shape}", color=color, text_color="white", fontsize=9)
    scores = "scores\n$QK^\\top / \\sqrt{d}$\n" + f"(T, S) = ({T}, {S})"
    box(ax, 4.4, 2.4, 2.2, 1.4, scores, color=SKY, fontsize=9)
    arrow(ax, (2.4, 3.8), (4.4, 3.4))
    arrow(ax, (2.4, 2.4), (4.4, 2.8))
    box(ax, 8.0, 2.5, 2.2, 1.2, f"weights\n(T, S) = ({T}, {S})", color=YELLOW, fontsize=9)
    arrow(ax, (6.6, 3.1), (8.0, 3.1), "softmax\nover keys")
    attended = f"attended\nweights @ V\n(T, d_v) = ({T}, {d_v})"
    box(ax, 11.2, 0.6, 2.2, 1.4, attended, color=LIGHT, fontsize=9)
    arrow(ax, (9.1, 2.5), (11.6, 2.0))
    arrow(ax, (2.4, 0.7), (11.2, 1.0))
    return ax.figure
