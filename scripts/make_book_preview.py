"""Draw the introduction's preview into book/_static/book_preview.png.

Run it after the reference model or the book's parts change (python scripts/make_book_preview.py);
tests/test_diagrams_book_preview.py checks that the committed picture is this script's output, to
within one step of the colour scale (the weights' last float digits can differ between CPUs).
"""

import argparse
from io import BytesIO
from pathlib import Path

import matplotlib
from matplotlib import pyplot as plt

from attnbook.book.diagrams import book_preview

matplotlib.use("Agg")
OUTPUT = Path(__file__).resolve().parents[1] / "book" / "_static" / "book_preview.png"


def render() -> bytes:
    """The preview as PNG bytes, with no metadata that could change between runs."""
    buffer = BytesIO()
    figure = book_preview()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    args.output.write_bytes(render())
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
