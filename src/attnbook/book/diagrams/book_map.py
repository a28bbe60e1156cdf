"""The introduction's picture: the whole book as a map, one row of chapters per part."""

from matplotlib.figure import Figure
from matplotlib.patches import Circle

from attnbook.book.diagrams._draw import (
    BLACK,
    BLUE,
    GREEN,
    LIGHT,
    ORANGE,
    PINK,
    SKY,
    arrow,
    box,
    canvas,
    label,
)

# (part caption, ((chapter number, short title, minutes for a learner who runs the cells), ...)):
# the parts and chapters of _toc.yml in order (tests/test_diagrams_book_map.py checks it). The
# minutes are the fresh readers' reading times with the cells run (round 4 for chapters 00-15,
# round 5 for 16-19).
BOOK_PARTS = (
    ("Getting started", (("00", "conventions", 15),)),
    (
        "Foundations",
        (
            ("01", "Bahdanau", 40),
            ("02", "scoring, sqrt(d)", 35),
            ("03", "self-attention", 40),
            ("04", "masks", 25),
        ),
    ),
    ("Many heads", (("05", "multi-head", 30), ("06", "MQA / GQA", 30))),
    (
        "Beyond",
        (
            ("07", "positions", 35),
            ("08", "KV cache", 45),
            ("09", "tiled attention", 70),
            ("10", "ring attention", 60),
            ("11", "latent (MLA)", 55),
        ),
    ),
    (
        "Capstone",
        (("12", "tiny GPT", 45), ("13", "trained heads", 60), ("14", "circuits", 50)),
    ),
    ("Today's models", (("15", "today's attention", 75),)),
    (
        "Attention engineering now",
        (
            ("16", "a Triton kernel", 60),
            ("17", "serving", 50),
            ("18", "linear attention", 55),
            ("19", "sparse attention", 50),
        ),
    ),
)

# (badge letter, badge colour, path name, chapters): the introduction's two shorter reading
# paths, marked on the map by a badge on each of their chapters.
_CORE = ("00", "02", "03", "04", "05", "06", "08")
READING_PATHS = (
    ("F", GREEN, "fast attention and serving", (*_CORE, "09", "16", "17")),
    ("H", PINK, "what trained heads do", (*_CORE, "11", "12", "13", "14")),
)

_BOX_W, _BOX_H, _GAP, _ROW = 2.3, 0.95, 0.45, 1.45
_LEFT = 3.8  # room for the part captions
_COLOURS = (LIGHT, SKY, LIGHT, SKY, LIGHT, ORANGE, BLUE)
_BADGE_R, _LEGEND_LINE = 0.17, 0.5  # badge radius; height of a legend line under the rows
_ARROW_AT = 0.3  # where a row-to-row arrow leaves and meets a box, as a fraction of its width


def chapter_ranges(chapters) -> str:
    """Chapter numbers as a reader writes them: runs of three or more as a range, "0, 2-6, 8"."""
    numbers = sorted(int(number) for number in chapters)
    runs = [[numbers[0]]]
    for number in numbers[1:]:
        if number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    spans = [f"{run[0]}-{run[-1]}" if len(run) >= 3 else ", ".join(map(str, run)) for run in runs]
    return ", ".join(spans)


def _check_paths(parts, paths) -> None:
    drawn = {number for _, part in parts for number, _, _ in part}
    for _, _, name, chapters in paths:
        missing = [number for number in chapters if number not in drawn]
        if missing:
            raise ValueError(
                f"paths: {name!r} names chapters {missing!r}, expected chapters of the map"
            )


def path_minutes(parts, chapters) -> int:
    """The reading minutes of ``chapters`` (their numbers), from the map's ``parts``."""
    minutes = {number: m for _, part in parts for number, _, m in part}
    return sum(minutes[number] for number in chapters)


def _badge(ax, centre, letter, colour) -> None:
    ax.add_patch(Circle(centre, _BADGE_R, facecolor=colour, edgecolor=BLACK, linewidth=0.8))
    label(ax, centre, letter, fontsize=8)


def _check_parts(parts) -> None:
    if not parts or any(not chapters for _, chapters in parts):
        raise ValueError(f"parts: expected one or more (caption, chapters) pairs, got {parts!r}")
    for _, chapters in parts:
        for chapter in chapters:
            number, title, minutes = chapter
            if not (isinstance(minutes, int) and minutes > 0):
                raise ValueError(f"parts: chapter {number} {title!r} has minutes {minutes!r}")


def book_map(*, parts=BOOK_PARTS, paths=READING_PATHS) -> Figure:
    """Every chapter as a box (number, short title, minutes), one row per part, read downwards.

    Arrows lead from each chapter to the next, in the order they are read: along each row, then
    from a row's last chapter to the next row's first. The colours only tell the parts apart. A
    lettered badge on a box's top edge marks a chapter of one of the shorter reading ``paths``,
    named with its total minutes in a legend under the rows.
    """
    _check_parts(parts)
    _check_paths(parts, paths)
    widest = max(len(chapters) for _, chapters in parts)
    width = _LEFT + widest * (_BOX_W + _GAP)
    legend = len(paths) * _LEGEND_LINE + 0.2
    height = len(parts) * _ROW + 0.3 + legend
    ax = canvas(width, height, inches_per_unit=0.62)
    for row, (caption, chapters) in enumerate(parts):
        y = height - (row + 1) * _ROW
        label(ax, (0.1, y + _BOX_H / 2), caption, fontsize=10, ha="left")
        colour = _COLOURS[row % len(_COLOURS)]
        text_colour = "white" if colour == BLUE else "black"
        for column, (number, title, minutes) in enumerate(chapters):
            x = _LEFT + column * (_BOX_W + _GAP)
            text = f"{number} {title}\n~{minutes} min"
            box(ax, x, y, _BOX_W, _BOX_H, text, color=colour, text_color=text_colour, fontsize=9)
            on_paths = [(letter, c) for letter, c, _, path in paths if number in path]
            for k, (letter, badge_colour) in enumerate(on_paths):
                centre = (x + _BOX_W - 0.3 - k * 2.3 * _BADGE_R, y + _BOX_H)
                _badge(ax, centre, letter, badge_colour)
            if column > 0:
                arrow(ax, (x - _GAP, y + _BOX_H / 2), (x, y + _BOX_H / 2))
        if row + 1 < len(parts):
            # both ends left of the box's middle, clear of the badges on its right
            last = _LEFT + (len(chapters) - 1) * (_BOX_W + _GAP) + _ARROW_AT * _BOX_W
            arrow(ax, (last, y), (_LEFT + _ARROW_AT * _BOX_W, y - (_ROW - _BOX_H)))
    for k, (letter, badge_colour, name, chapters) in enumerate(paths):
        y = legend - (k + 1) * _LEGEND_LINE
        _badge(ax, (0.3, y), letter, badge_colour)
        text = f"{name}: chapters {chapter_ranges(chapters)}, {path_minutes(parts, chapters)} min"
        label(ax, (0.65, y), text, fontsize=10, ha="left")
    return ax.figure
