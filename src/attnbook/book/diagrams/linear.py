"""Chapter 18's pictures: a growing cache beside a fixed state; one delta-rule update as an erase
then a write; the chunked form's triangular systems and the state passed between chunks; the
Gated DeltaNet layer as a block diagram."""

import math

from matplotlib.figure import Figure

from attnbook.book.diagrams._draw import (
    BLUE,
    GREEN,
    LIGHT,
    ORANGE,
    SKY,
    YELLOW,
    arrow,
    box,
    canvas,
    label,
)
from attnbook.core._checks import check_int

__all__ = [
    "cache_versus_state",
    "chunked_delta_rule",
    "delta_rule_update",
    "gated_deltanet_layer",
]


def cache_versus_state(*, length: int = 6, d_k: int = 4, d_v: int = 4) -> Figure:
    """Left: a KV cache of ``length`` rows, an arrow from query t to each. Right: one state.

    The state has d_k x d_v numbers, and d_k more for the normaliser.

    The state is linear attention's running sum (S and the normaliser z, before the delta rule
    and the gate change how it is written), updated by each token and read by the query with a
    single product, whatever the number of tokens before it.
    """
    ax = canvas(13, 7.2)
    label(ax, (3.0, 6.8), "softmax attention: a cache that grows", fontsize=11)
    for row in range(length):
        y = 5.6 - row * 0.62
        box(ax, 0.5, y, 1.6, 0.5, f"k_{row + 1}", color=SKY, fontsize=9)
        box(ax, 2.3, y, 1.6, 0.5, f"v_{row + 1}", color=SKY, fontsize=9)
    bottom = 5.6 - (length - 1) * 0.62
    middle = (5.6 + bottom) / 2 + 0.25  # the height halfway between the first and last rows
    box(ax, 5.0, middle - 0.35, 1.2, 0.7, "q_t")
    for row in range(length):  # one arrow to every row: the query reads the whole cache
        arrow(ax, (5.0, middle), (3.95, 5.85 - row * 0.62))
    label(
        ax,
        (2.2, bottom - 0.55),
        f"t = {length}: {length} keys and {length} values,\n"
        "one more of each per token; query t reads all t",
        fontsize=9,
    )
    label(ax, (9.7, 6.8), "linear attention: a state that does not", fontsize=11)
    box(ax, 8.4, 3.0, 2.6, 2.2, f"S\n({d_k} x {d_v})\n\nz ({d_k})", color=ORANGE)
    box(ax, 7.0, 5.7, 1.3, 0.6, "k_t, v_t", color=LIGHT, fontsize=9)
    box(ax, 11.6, 3.75, 1.2, 0.7, "q_t")
    arrow(ax, (7.7, 5.7), (8.6, 5.2), "write", curve=0.1)
    arrow(ax, (11.6, 4.1), (11.0, 4.1), "")
    label(ax, (10.9, 2.55), "o_t = S^T phi(q_t) / phi(q_t)^T z", fontsize=9)
    label(
        ax,
        (9.7, 1.9),
        "S <- S + phi(k_t) v_t^T,   z <- z + phi(k_t)",
        fontsize=9.5,
        background=True,
    )
    label(
        ax,
        (9.7, 1.1),
        f"after any number of tokens: {d_k} x {d_v} + {d_k} = {d_k * d_v + d_k} numbers per head",
        fontsize=9,
    )
    return ax.figure


def delta_rule_update(*, beta: float = 0.5) -> Figure:
    """One step S_t = alpha (I - beta k k^T) S + beta k v^T, drawn as erase, fade, write.

    Top: the three operations in order. Bottom: what the memory returns for the key k_t, in a
    two-dimensional value space (alpha = 1 there): the held read h = S^T k_t moves a share
    ``beta`` of the way to v_t, so ``beta = 1`` stores v_t exactly; reads along directions
    orthogonal to k_t do not change.
    """
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 <= beta <= 1:
        raise ValueError(f"beta: expected a number in [0, 1], got {beta!r}")
    ax = canvas(13, 8.6)
    label(ax, (6.5, 8.25), "one step of the gated delta rule", fontsize=11)
    steps = [
        ("S_{t-1}", LIGHT),
        ("erase along k_t\n(I - beta k_t k_t^T) S", SKY),
        ("fade the whole memory\nalpha_t x", YELLOW),
        ("write along k_t\n+ beta k_t v_t^T", ORANGE),
        ("S_t", LIGHT),
    ]
    widths = [1.1, 2.6, 2.6, 2.6, 1.1]
    x = 0.25
    for index, ((text, color), width) in enumerate(zip(steps, widths, strict=True)):
        box(ax, x, 6.4, width, 1.1, text, color=color, fontsize=9)
        if index < len(steps) - 1:
            arrow(ax, (x + width, 6.95), (x + width + 0.4, 6.95))
        x += width + 0.4
    label(
        ax,
        (6.5, 5.75),
        "with alpha = 1 the steps add up to S_t = S + beta k_t (v_t - S^T k_t)^T: "
        "what is written is the correction, not the value",
        fontsize=9,
    )
    origin = (3.0, 0.9)
    held, value = (2.0, 3.0), (6.4, 0.8)
    read = tuple((1 - beta) * h + beta * v for h, v in zip(held, value, strict=True))

    def at(point: tuple[float, float]) -> tuple[float, float]:
        return (origin[0] + point[0], origin[1] + point[1])

    arrow(ax, origin, at(held), color=BLUE)
    arrow(ax, origin, at(value), color=GREEN)
    arrow(ax, at(held), at(value), color="grey", style="-")
    arrow(ax, origin, at(read), color=ORANGE)
    label(ax, (at(held)[0], at(held)[1] + 0.3), "held: S_{t-1}^T k_t", fontsize=9, color=BLUE)
    label(ax, (at(value)[0] + 0.5, at(value)[1] - 0.3), "new value v_t", fontsize=9)
    label(
        ax,
        (at(read)[0] + 0.3, at(read)[1] + 0.35),
        f"read after: S_t^T k_t = {1 - beta:g} held + {beta:g} v_t",
        fontsize=9,
        ha="left",
        background=True,
    )
    label(
        ax,
        (1.6, 4.9),
        f"the read for k_t, in value space (beta = {beta:g}, alpha = 1)",
        fontsize=10,
        ha="left",
    )
    label(
        ax,
        (0.3, 0.35),
        "beta = 1 stores v_t exactly; beta = 0 changes nothing; "
        "reads along keys orthogonal to k_t are untouched",
        fontsize=9,
        ha="left",
    )
    return ax.figure


def chunked_delta_rule(*, length: int = 12, chunk_size: int = 4) -> Figure:
    """The chunked form: ``length`` tokens in chunks of ``chunk_size`` (the last may be shorter).

    Each chunk solves a C x C lower-triangular system (identity on the diagonal, the decayed
    key overlaps M below it) for its corrections U, every chunk at once; only the state S
    passes from chunk to chunk, T / C sequential steps. A cost line compares the work.
    """
    check_int("length", length, high=24)
    check_int("chunk_size", chunk_size, high=min(length, 8))
    n_chunks = math.ceil(length / chunk_size)
    cell = min(0.5, 2.4 / chunk_size)
    span = chunk_size * cell + 1.5  # width per chunk, gap included
    width = max(11.5, 1.4 + n_chunks * span)
    ax = canvas(width, 6.8)
    label(
        ax,
        (width / 2, 6.45),
        f"the chunked form: T = {length} tokens in chunks of C = {chunk_size}",
        fontsize=11,
    )
    top = 2.6 + chunk_size * cell
    for chunk in range(n_chunks):
        first = chunk * chunk_size
        size = min(chunk_size, length - first)
        left = 1.6 + chunk * span
        label(ax, (left + size * cell / 2, top + 0.45), f"tokens {first + 1}-{first + size}")
        for row in range(size):
            for col in range(row + 1):
                color = YELLOW if col == row else ORANGE
                box(ax, left + col * cell, top - (row + 1) * cell, cell, cell, color=color)
        state = (left - 1.25, 1.0)
        box(ax, *state, 0.95, 0.6, f"S_{first}", fontsize=9)
        arrow(ax, (state[0] + 0.5, 1.6), (left, top - size * cell / 2), curve=-0.2)
    end = (1.6 + n_chunks * span - 1.25, 1.0)
    box(ax, *end, 0.95, 0.6, f"S_{length}", fontsize=9)
    for chunk in range(n_chunks):
        start = 1.6 + chunk * span - 0.3
        arrow(ax, (start, 1.3), (start + span - 0.95, 1.3))
    label(
        ax,
        (width / 2, 0.45),
        "each chunk: a C x C lower-triangular system (I + diag(beta) M) (diagonal: I, "
        "below it: M)\ngives U0 and W for every chunk at once; U = U0 - W S needs the "
        "chunk's start state S,\n"
        f"so only S passes from chunk to chunk: {n_chunks} sequential steps "
        "(T / C, rounded up)",
        fontsize=8.5,
    )
    label(
        ax,
        (width / 2, 6.0),
        "work per head: O(T C d + T d^2), against softmax attention's O(T^2 d)",
        fontsize=9.5,
        background=True,
    )
    return ax.figure


def gated_deltanet_layer(*, d_model: int = 32, n_heads: int = 4, conv_kernel: int = 4) -> Figure:
    """The Gated DeltaNet layer of chapter 18 as blocks, the shapes written in.

    Top row: x -> q, k, v projections -> causal convolution + SiLU -> L2 norm -> the gated delta
    rule, with the write strength beta and the decay alpha computed from x on the side. Bottom
    row, right to left: RMS norm per head -> times SiLU of the gate -> output projection. The
    three boxes computed from x (beta, alpha, the gate) each say "from x", and an arrow from x's
    box reaches each of beta and alpha.
    """
    check_int("d_model", d_model)
    check_int("n_heads", n_heads)
    check_int("conv_kernel", conv_kernel)
    if d_model % n_heads:
        raise ValueError(f"n_heads: expected a divisor of d_model = {d_model}, got {n_heads!r}")
    d_head = d_model // n_heads
    ax = canvas(16.0, 8.7, inches_per_unit=0.62)
    title = f"Gated DeltaNet: D = {d_model}, H = {n_heads} heads of d_head = {d_head}"
    label(ax, (8.0, 8.45), title, fontsize=11)
    top = [
        ("x\n(T, D)", LIGHT, 1.2),
        ("q, k, v\nprojections\n(T, 3D)", SKY, 2.0),
        (f"causal conv\n({conv_kernel} tokens)\n+ SiLU", SKY, 2.0),
        ("L2 norm q, k\nper head;\nq / sqrt(d_head)", SKY, 2.2),
        (
            "gated delta rule, per head\nS_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1}"
            "\n+ beta_t k_t v_t^T",
            ORANGE,
            4.9,
        ),
    ]
    x = 0.2
    for index, (text, color, width) in enumerate(top):
        box(ax, x, 3.6, width, 1.4, text, color=color, fontsize=8.5)
        if index < len(top) - 1:
            arrow(ax, (x + width, 4.3), (x + width + 0.5, 4.3))
        x += width + 0.5
    rule = x - 0.5 - top[-1][2]  # the rule's left edge
    box(
        ax,
        rule - 2.4,
        5.9,
        3.2,
        1.1,
        "beta_t = sigmoid(W_b x)\nwrite strength, from x",
        color=YELLOW,
        fontsize=8,
    )
    alpha = "alpha_t = exp(-e^A\nsoftplus(W_a x + b))\ndecay, from x"
    box(ax, rule + 1.5, 5.9, 3.2, 1.1, alpha, color=YELLOW, fontsize=8)
    arrow(ax, (rule - 0.8, 5.9), (rule + 0.8, 5.0))
    arrow(ax, (rule + 3.1, 5.9), (rule + 3.1, 5.0))
    arrow(ax, (0.8, 5.0), (rule - 2.4, 6.45), "from x", curve=-0.15)
    arrow(ax, (0.5, 5.0), (rule + 2.1, 7.0), curve=-0.22)  # over beta's box, into alpha's
    bottom = [  # in the order the data flows, drawn right to left
        ("RMS norm\nper head,\nheads merged", GREEN, 2.4),
        ("x SiLU(gate)\ngate = W_g x,\nfrom x; (T, D)", YELLOW, 2.4),
        ("output\nprojection\n-> (T, D)", LIGHT, 2.2),
    ]
    right = rule + 3.7
    arrow(ax, (rule + 2.45, 3.6), (right - 1.2, 2.3))
    for index, (text, color, width) in enumerate(bottom):
        box(ax, right - width, 0.9, width, 1.4, text, color=color, fontsize=8.5)
        if index:
            arrow(ax, (right + 0.5, 1.6), (right, 1.6))
        right -= width + 0.5
    label(
        ax,
        (8.0, 0.35),
        f"state per head: d_head x d_head = {d_head * d_head} numbers; per layer, the last "
        f"{conv_kernel - 1} inputs of the convolution, {conv_kernel - 1} x 3D = "
        f"{(conv_kernel - 1) * 3 * d_model} numbers; whatever T is",
        fontsize=9,
    )
    return ax.figure
