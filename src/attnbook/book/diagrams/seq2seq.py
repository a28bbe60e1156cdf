"""Chapter 1's schematic: the plain decoder's one summary c against attention's fresh c_t."""

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import BLUE, LIGHT, ORANGE, SKY, arrow, box, canvas, label
from attnbook.core._checks import check_int

_PANEL = 7.2  # width of one panel in diagram units
_BOX_W, _BOX_H = 0.9, 0.6
_ANNOTATION_Y, _CONTEXT_Y, _STATE_Y = 0.7, 2.5, 4.3


def _annotation_x(x0: float, j: int) -> float:
    return x0 + 0.5 + 1.3 * j


def _state_x(x0: float, t: int) -> float:
    return x0 + 0.3 + 1.75 * t


def _encoder_and_decoder(ax: Axes, x0: float, n_inputs: int, n_steps: int) -> None:
    """The annotations h_j along the bottom, the decoder states s_t and outputs y_t on top."""
    for j in range(n_inputs):
        box(ax, _annotation_x(x0, j), _ANNOTATION_Y, _BOX_W, _BOX_H, f"$h_{j + 1}$", color=SKY)
    label(ax, (x0 + 3.1, 0.3), "encoder annotations $h_j$ (bidirectional GRU)", fontsize=9)
    for t in range(n_steps + 1):
        x = _state_x(x0, t)
        box(ax, x, _STATE_Y, _BOX_W, _BOX_H, f"$s_{t}$", color=LIGHT)
        if t > 0:
            arrow(ax, (x - 0.85, _STATE_Y + _BOX_H / 2), (x, _STATE_Y + _BOX_H / 2))
            arrow(ax, (x + _BOX_W / 2, _STATE_Y + _BOX_H), (x + _BOX_W / 2, 5.45))
            label(ax, (x + _BOX_W / 2, 5.65), f"$y_{t}$")


def _plain_panel(ax: Axes, x0: float, n_inputs: int, n_steps: int) -> None:
    label(ax, (x0 + 3.4, 6.3), "plain decoder: one summary $c$", fontsize=11)
    _encoder_and_decoder(ax, x0, n_inputs, n_steps)
    c_x = x0 + 2.7
    box(ax, c_x, _CONTEXT_Y, 1.2, _BOX_H, "$c$", color=ORANGE)
    top = _ANNOTATION_Y + _BOX_H
    arrow(ax, (_annotation_x(x0, n_inputs - 1) + 0.3, top), (c_x + 1.0, _CONTEXT_Y), color=BLUE)
    arrow(ax, (_annotation_x(x0, 0) + 0.6, top), (c_x + 0.2, _CONTEXT_Y), color=BLUE)
    for t in range(n_steps + 1):
        target = (_state_x(x0, t) + _BOX_W / 2, _STATE_Y)
        arrow(ax, (c_x + 0.6, _CONTEXT_Y + _BOX_H), target, color=ORANGE)
    # c also feeds every output, y_t = softmax(W_o [s_t; c]): a branch off the line into s_t
    # that passes s_t's right side
    c_top = (c_x + 0.6, _CONTEXT_Y + _BOX_H)
    for t in range(1, n_steps + 1):
        x = _state_x(x0, t)
        s_bottom = (x + _BOX_W / 2, _STATE_Y)
        branch = tuple(a + 0.8 * (b - a) for a, b in zip(c_top, s_bottom, strict=True))
        arrow(ax, branch, (x + _BOX_W / 2 + 0.15, 5.45), color=ORANGE, curve=0.75)
    label(ax, (x0 + 3.3, 3.55), "the same $c$ at every step", fontsize=9, background=True)


def _attention_panel(ax: Axes, x0: float, n_inputs: int, n_steps: int) -> None:
    label(ax, (x0 + 3.4, 6.3), "attention decoder: a fresh $c_t$ per step", fontsize=11)
    _encoder_and_decoder(ax, x0, n_inputs, n_steps)
    # s_0 = tanh(W_init c) starts this decoder too: the summary c feeds s_0 only
    s0_middle = _state_x(x0, 0) + _BOX_W / 2
    box(ax, s0_middle - 0.3, _CONTEXT_Y, 0.6, _BOX_H, "$c$", color=ORANGE)
    top = _ANNOTATION_Y + _BOX_H
    arrow(ax, (_annotation_x(x0, 0) + 0.2, top), (s0_middle - 0.1, _CONTEXT_Y), color=BLUE)
    last = _annotation_x(x0, n_inputs - 1)
    arrow(ax, (last + 0.2, top), (s0_middle + 0.2, _CONTEXT_Y), color=BLUE)
    arrow(ax, (s0_middle, _CONTEXT_Y + _BOX_H), (s0_middle, _STATE_Y), color=ORANGE)
    for t in range(1, n_steps + 1):
        x = _state_x(x0, t)
        box(ax, x, _CONTEXT_Y, _BOX_W, _BOX_H, f"$c_{t}$", color=ORANGE)
        for j in range(n_inputs):
            start = (_annotation_x(x0, j) + _BOX_W / 2, _ANNOTATION_Y + _BOX_H)
            arrow(ax, start, (x + _BOX_W / 2, _CONTEXT_Y), color=SKY, style="-")
        arrow(ax, (x + _BOX_W / 2, _CONTEXT_Y + _BOX_H), (x + _BOX_W / 2, _STATE_Y), color=ORANGE)
        # c_t also feeds the output, y_t = softmax(W_o [s_t; c_t]): past s_t's right side
        output_at = (x + _BOX_W / 2 + 0.15, 5.45)
        arrow(ax, (x + _BOX_W, _CONTEXT_Y + _BOX_H / 2), output_at, color=ORANGE, curve=0.2)
        query_start = (_state_x(x0, t - 1) + _BOX_W, _STATE_Y)
        arrow(ax, query_start, (x + 0.1, _CONTEXT_Y + _BOX_H), color=BLUE, curve=0.2)
    label(ax, (x0 + 1.75, 3.55), "query $s_{t-1}$", fontsize=9, color=BLUE, background=True)
    # the label names the lines from the annotations to c_t, one weight per line
    line_start = (_annotation_x(x0, n_inputs - 1) + _BOX_W / 2, _ANNOTATION_Y + _BOX_H)
    line_end = (_state_x(x0, n_steps) + _BOX_W / 2, _CONTEXT_Y)
    on_line = tuple(a + 0.6 * (b - a) for a, b in zip(line_start, line_end, strict=True))
    weights_at = (line_end[0] + 0.75, _ANNOTATION_Y + 0.9)
    arrow(ax, (weights_at[0] - 0.55, weights_at[1] + 0.1), on_line, style="-")
    label(ax, weights_at, r"weights $\alpha_{tj}$", fontsize=9, background=True)


def seq2seq_decoders(*, n_inputs: int = 4, n_steps: int = 3) -> Figure:
    """Chapter 1's two decoders side by side, over ``n_inputs`` annotations, ``n_steps`` steps.

    Left: the plain encoder-decoder, whose decoder states s_t and outputs y_t all read one
    summary c built from the encoder's last states. Right: Bahdanau's decoder, where the
    previous state s_{t-1} queries every annotation h_j and the weighted average c_t feeds
    step t's state s_t and its output y_t.
    """
    check_int("n_inputs", n_inputs)
    check_int("n_steps", n_steps)
    ax = canvas(2 * _PANEL, 6.7, inches_per_unit=0.62)
    _plain_panel(ax, 0.0, n_inputs, n_steps)
    _attention_panel(ax, _PANEL, n_inputs, n_steps)
    return ax.figure
