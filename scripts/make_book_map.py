"""Draw the introduction's map of the book into book/_static/book_map.png.

Run it after a chapter is added, renamed or moved (python scripts/make_book_map.py);
tests/test_diagrams_book_map.py checks that the committed picture is this script's output.
"""

import argparse
from io import BytesIO
from pathlib import Path

import matplotlib
from matplotlib import pyplot as plt

from attnbook.book.diagrams import book_map

matplotlib.use("Agg")
OUTPUT = Path(__file__).resolve().parents[1] / "book" / "_static" / "book_map.png"


def render() -> bytes:
    """The map as PNG bytes, with no metadata that could change between runs."""
    buffer = BytesIO()
    figure = book_map()
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
