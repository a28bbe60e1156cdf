"""The introduction's map of the book: it lists _toc.yml's parts and chapters, and the committed
picture is the script's current output."""

from pathlib import Path

import matplotlib
import pytest
import yaml
from helpers import load_script
from matplotlib import pyplot as plt

from attnbook.book.diagrams import book_map
from attnbook.book.diagrams.book_map import (
    BOOK_PARTS,
    READING_PATHS,
    chapter_ranges,
    path_minutes,
)

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]


def test_the_map_lists_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    expected = [
        (part["caption"], [Path(c["file"]).name[:2] for c in part["chapters"]])
        for part in toc["parts"]
        if part["caption"] != "Back matter"
    ]
    drawn = [(caption, [number for number, _, _ in chapters]) for caption, chapters in BOOK_PARTS]
    assert drawn == expected


def test_the_committed_picture_is_current():
    committed = (ROOT / "book/_static/book_map.png").read_bytes()
    assert committed == load_script("make_intro_figures").render(book_map), (
        "run: python scripts/make_intro_figures.py"
    )


def test_the_map_draws_every_chapter():
    figure = book_map(
        parts=(("A", (("00", "first", 5), ("01", "second", 7))), ("B", (("02", "third", 9),))),
        paths=(),
    )
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert "00 first\n~5 min" in texts and "02 third\n~9 min" in texts and "B" in texts
    plt.close(figure)


@pytest.mark.parametrize(
    "parts", [(), (("A", ()),), (("A", (("00", "x", 0),)),), (("A", (("00", "x", "5"),)),)]
)
def test_bad_parts_are_refused_before_drawing(parts):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match="parts"):
        book_map(parts=parts)
    assert plt.get_fignums() == before


def test_a_path_through_a_chapter_not_on_the_map_is_refused():
    parts = (("A", (("00", "first", 5),)),)
    with pytest.raises(ValueError, match=r"paths: .*'07'"):
        book_map(parts=parts, paths=(("Q", "white", "quick", ("00", "07")),))


def test_the_arrows_lead_from_each_chapter_to_the_next():
    from matplotlib.patches import FancyArrowPatch

    figure = book_map()
    arrows = [p for p in figure.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == sum(len(chapters) for _, chapters in BOOK_PARTS) - 1
    plt.close(figure)


def test_each_reading_path_badges_exactly_its_chapters():
    figure = book_map()
    texts = figure.axes[0].texts
    for letter, _, name, chapters in READING_PATHS:
        badges = [t for t in texts if t.get_text() == letter]
        # one badge per chapter on the path, plus the legend's
        assert len(badges) == len(chapters) + 1
        boxes = [t for t in texts if t.get_text()[:2] in chapters and "\n~" in t.get_text()]
        assert len(boxes) == len(chapters)
        minutes = path_minutes(BOOK_PARTS, chapters)
        legend = f"{name}: chapters {chapter_ranges(chapters)}, {minutes} min"
        assert legend in [t.get_text() for t in texts]
    plt.close(figure)


@pytest.mark.parametrize(
    ("chapters", "written"),
    [
        (("00", "02", "03", "04", "05", "06", "08", "09", "16", "17"), "0, 2-6, 8, 9, 16, 17"),
        (("11", "12", "13", "14"), "11-14"),
        (("07",), "7"),
        (("01", "02", "05"), "1, 2, 5"),
    ],
)
def test_chapter_ranges_join_runs_of_three_or_more(chapters, written):
    assert chapter_ranges(chapters) == written


def test_a_badge_sits_on_its_chapters_box():
    parts = (("A", (("00", "first", 5), ("01", "second", 7))),)
    figure = book_map(parts=parts, paths=(("Q", "white", "quick", ("01",)),))
    ax = figure.axes[0]
    (badge, _legend) = [t.get_position() for t in ax.texts if t.get_text() == "Q"]
    first, second = [t.get_position() for t in ax.texts if "\n~" in t.get_text()]
    # the badge is over the second box, not the first
    assert abs(badge[0] - second[0]) < abs(badge[0] - first[0])
    assert "quick: chapters 1, 7 min" in [t.get_text() for t in ax.texts]
    plt.close(figure)


@pytest.mark.parametrize(
    ("chapters", "stated"),
    [
        (None, "about 925 minutes"),
        ("00 01 02 03 04 05 06", "215 minutes"),
        (" ".join(READING_PATHS[0][3]), "F, 400 minutes"),
        (" ".join(READING_PATHS[1][3]), "H, 430 minutes"),
    ],
)
def test_the_introduction_states_the_maps_reading_times(chapters, stated):
    minutes = {number: m for _, part in BOOK_PARTS for number, _, m in part}
    chosen = minutes if chapters is None else {n: minutes[n] for n in chapters.split()}
    total = stated.replace("about ", "").split()[-2]
    assert sum(chosen.values()) == int(total)
    # the prose wraps lines anywhere: compare with runs of white space made single spaces
    introduction = " ".join((ROOT / "book/intro.md").read_text().split())
    assert stated in introduction
