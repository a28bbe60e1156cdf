"""The introduction's preview: a trained head's weights on real text, the strip of the book's
parts, and the committed picture, which is the script's output."""

from io import BytesIO
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
import yaml
from helpers import load_script
from matplotlib import pyplot as plt
from matplotlib.image import imread

from attnbook.book.diagrams import book_preview
from attnbook.book.diagrams.preview import CHAPTER_STRIP, PREVIEW_TEXT, preview_weights

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_picture_is_current():
    committed = imread(ROOT / "book/_static/book_preview.png")
    rendered = imread(BytesIO(load_script("make_intro_figures").render(book_preview)))
    assert committed.shape == rendered.shape, "run: python scripts/make_intro_figures.py"
    # one step of the colour scale: a weight's last float digit may tip a cell into the next
    assert np.abs(committed - rendered).max() <= 4 / 255, (
        "run: python scripts/make_intro_figures.py"
    )


def test_the_picture_is_small():
    assert (ROOT / "book/_static/book_preview.png").stat().st_size < 100_000


def test_the_weights_are_causal_rows_that_sum_to_one():
    weights = preview_weights()
    n = len(PREVIEW_TEXT)
    assert weights.shape == (n, n)
    torch.testing.assert_close(weights.sum(-1), torch.ones(n))
    assert torch.equal(weights.triu(1), torch.zeros(n, n))


def test_the_introduction_states_how_often_the_previous_character_wins():
    weights = preview_weights()[1:]  # (T - 1, T): every query with a previous character
    top_two = weights.topk(2, dim=-1).values
    # far from a tie, so no CPU's rounding changes which key wins
    assert (top_two[:, 0] - top_two[:, 1]).min() > 1e-3
    previous = torch.arange(len(weights))  # key i - 1 of query i
    wins = int((weights.argmax(-1) == previous).sum())
    stated = f"{wins} of its {len(weights)} queries"
    introduction = " ".join((ROOT / "book/intro.md").read_text().split())
    assert stated in introduction


def test_the_heatmap_follows_the_books_convention():
    figure = book_preview()
    heat = figure.axes[0]
    labels = [t.get_text() for t in heat.get_yticklabels()]
    keys = [t.get_text() for t in heat.get_xticklabels()]
    shown = heat.images[0].get_array()
    plt.close(figure)
    characters = ["␣" if c == " " else c for c in PREVIEW_TEXT]
    assert labels == characters and keys == characters
    assert heat.get_ylabel() == "query" and heat.get_xlabel() == "key"
    assert heat.images[0].colorbar is not None
    np.testing.assert_allclose(shown, preview_weights().numpy())


def test_the_strip_covers_every_chapter_once_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chapters = [
        int(Path(c["file"]).name[:2])
        for part in toc["parts"]
        if part["caption"] != "Back matter"
        for c in part["chapters"]
    ]
    covered = []
    for span, _ in CHAPTER_STRIP:
        first, _, last = span.partition("-")
        covered += range(int(first), int(last or first) + 1)
    assert covered == chapters
    figure = book_preview()
    texts = [t.get_text() for t in figure.axes[1].texts]
    plt.close(figure)
    for span, built in CHAPTER_STRIP:
        assert f"ch. {span}" in texts and built in texts


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": "A"}, "text: expected a string of two characters or more, got 'A'"),
        ({"text": "x" * 129}, "text: 129 characters, expected at most the model's 128"),
        ({"text": "héllo"}, "text: characters not in the vocabulary"),
        ({"layer": 4}, r"layer: expected an int in \[0, 3\], got 4"),
        ({"head": -1}, r"head: expected an int in \[0, 7\], got -1"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match=message):
        book_preview(**kwargs)
    assert plt.get_fignums() == before
