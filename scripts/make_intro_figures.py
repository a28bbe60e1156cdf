"""Draw the introduction's two figures into book/_static/: the preview and the book's map.

Run it after a chapter is added, renamed or moved, or after the reference model changes
(python scripts/make_intro_figures.py). tests/test_diagrams_book_map.py checks that the
committed map is this script's output byte for byte; tests/test_diagrams_book_preview.py checks
the preview to within one step of its colour scale (the weights' last float digits can differ
between CPUs).
"""

import argparse
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import matplotlib
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from attnbook.book.diagrams import book_map, book_preview

matplotlib.use("Agg")
STATIC = Path(__file__).resolve().parents[1] / "book" / "_static"
FIGURES = {"book_preview.png": book_preview, "book_map.png": book_map}


def render(draw: Callable[[], Figure]) -> bytes:
    """The figure ``draw()`` makes, as PNG bytes with no metadata that could change between
    runs."""
    buffer = BytesIO()
    figure = draw()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=STATIC)
    args = parser.parse_args()
    for name, draw in FIGURES.items():
        (args.folder / name).write_bytes(render(draw))
        print(f"wrote {args.folder / name}")


if __name__ == "__main__":
    main()
