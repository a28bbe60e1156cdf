"""Chapter 3's schematic: single-head self-attention's data flow, with the shape of each step."""

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
