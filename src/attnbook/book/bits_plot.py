"""A language model's loss as a progression of bars, in bits per character.

A loss in nats divided by ln 2 is bits per character: the bits a code built on the model would
spend on each character. :func:`plot_bits_per_character` draws one horizontal bar per model or
baseline, in the order given, each labelled with its bits, so a reader sees how far each step
(say uniform -> unigram -> bigram -> a trained model) takes the loss.
"""

import math
import numbers

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attnbook.book.plotting import OKABE_ITO

BASELINE_COLOUR = "#bbbbbb"  # grey: the baselines; the last bar, the model, in colour


def bits_per_character(loss_nats: float) -> float:
    """A cross-entropy in nats per character, in bits per character (divided by ln 2)."""
    return loss_nats / math.log(2)


def plot_bits_per_character(losses_nats: dict[str, float], *, title: str = "") -> Figure:
    """Horizontal bars, top to bottom in the order of ``losses_nats`` (name -> nats per char).

    Each bar's length is the loss in bits per character and its label gives the bits. All bars
    but the last are grey (the baselines); the last, the model, is coloured.
    """
    if not isinstance(losses_nats, dict) or not losses_nats:
        raise ValueError(
            f"losses_nats: expected a non-empty dict of name -> loss in nats, got {losses_nats!r}"
        )
    for name, loss in losses_nats.items():
        is_number = isinstance(loss, numbers.Real) and not isinstance(loss, bool)
        if not is_number or not math.isfinite(loss) or loss <= 0:
            raise ValueError(
                f"losses_nats[{name!r}]: expected a positive, finite loss in nats, got {loss!r}"
            )
    names = list(losses_nats)
    bits = [bits_per_character(float(losses_nats[name])) for name in names]
    colours = [BASELINE_COLOUR] * (len(names) - 1) + [OKABE_ITO[0]]
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(names) + 1.0), layout="constrained")
    bars = ax.barh(range(len(names)), bits, color=colours, height=0.6)
    ax.bar_label(bars, [f"{value:.2f} bits" for value in bits], padding=3, fontsize=9)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()  # the first entry on top
    ax.set_xlim(0, 1.2 * max(bits))
    ax.set_xlabel("loss (bits per character): lower is better")
    if title:
        ax.set_title(title)
    return fig
