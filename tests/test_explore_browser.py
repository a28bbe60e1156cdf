"""The explorer's frames in headless Chromium: the slider and keys show each frame's weights.

tests/test_browser.py checks the explorers of the built book; this test needs no built book. It
writes pages holding explorers made here, serves them on 127.0.0.1 and loads them with the same
browser and offline page (every request off this machine aborted and recorded) as that test.
Skipped, with the reason, when Chromium or Playwright is missing, except where ``CI`` is set.
"""

import os
from pathlib import Path

import pytest
import test_browser
import torch
from test_browser import CHROMIUM, _expected_colour, serving

from attnbook import explore
from attnbook.book.explore import _colours

TOKENS = ["the", "cat", "sat", "on", "a", "mat"]
FRAME_LABELS = ["step 0", "step 100", "step 200", "step 800"]
MATRIX = """root => [...root.querySelectorAll(".attnx-cell")].map(cell => cell.dataset.weight)"""
THUMBNAIL_PIXEL = """(button, i) => {
    const canvas = button.querySelector("canvas");
    const pixel = canvas.getContext("2d").getImageData(i % canvas.width,
        Math.floor(i / canvas.width), 1, 1).data;
    return `rgb(${pixel[0]}, ${pixel[1]}, ${pixel[2]})`;
}"""


def _skip_reason() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM}: install Debian's `chromium` package"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: `pip install -r requirements.txt`"
    return None


browser = test_browser.browser  # the same Chromium, started once for this module
offline_page = test_browser.offline_page  # a page whose requests off this machine are aborted
SKIP_REASON = _skip_reason()
if SKIP_REASON is not None and os.environ.get("CI", "").lower() in ("1", "true"):
    pytest.fail(f"CI is set, so the browser test must run, but {SKIP_REASON}", pytrace=False)
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))


def frames(n_frames: int, n_heads: int, length: int) -> torch.Tensor:
    """(F, H, T, T) causal weights that differ in every frame, head and row."""
    generator = torch.Generator().manual_seed(0)
    scores = 3 * torch.randn(n_frames, n_heads, length, length, generator=generator)
    causal = torch.ones(length, length).tril().bool()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)


WEIGHTS = frames(len(FRAME_LABELS), 2, len(TOKENS))  # (F, H, T, S)
# What the page embeds, for test_browser's colour helper: one colour scale for every frame.
EMBEDDED = {"weights": torch.round(WEIGHTS * 1000).long().flatten().tolist(), "colours": _colours()}
LONG = "w" * 20_000  # one label as long as a pasted paragraph, with no space to break at
HOSTILE = [  # labels that must stay text: markup, a script end, quotes, template, line separator
    "</script><img src=x onerror=window.attacked=1>",
    "<b onmouseover=window.attacked=1>b</b>",
    "\"'`${window.attacked=1}",
    "a\u2028b\u2029c",
    LONG,
    "\U0001f600 \u05e9\u05dc\u05d5\u05dd",
]
PAGES = {
    "frames.html": explore(WEIGHTS, TOKENS, frame_labels=FRAME_LABELS, title="training"),
    "plain.html": explore(WEIGHTS[0], TOKENS, title="one frame, no slider"),
    "hostile.html": explore(
        WEIGHTS[:2],
        HOSTILE,
        head_labels=[LONG, "<i>head</i>"],
        frame_labels=[LONG, "</script>"],
        title=LONG,
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    site = tmp_path_factory.mktemp("explorer_site")
    for name, explorer in PAGES.items():
        page = f'<!doctype html><html><head><meta charset="utf-8"></head><body>{explorer.html}'
        (site / name).write_text(page + "</body></html>\n", encoding="utf-8")
    with serving(site) as url:
        yield url


def frame_matrix(frame: int, head: int) -> list[str]:
    """The cells' weights as the page writes them: rounded to thousandths, 3 decimals."""
    start = (frame * WEIGHTS.shape[1] + head) * len(TOKENS) ** 2
    rounded = EMBEDDED["weights"][start : start + len(TOKENS) ** 2]
    return [f"{w / 1000:.3f}" for w in rounded]


def shown(root, frame: int, head: int) -> None:
    """Assert that the heatmap, readout, label and thumbnails show this frame and head."""
    where = f"frame {frame}, head {head}"
    assert root.get_attribute("data-frame") == str(frame), where
    assert root.get_attribute("data-head") == str(head), where
    assert root.evaluate(MATRIX) == frame_matrix(frame, head), f"{where}: wrong matrix"
    assert root.locator(".attnx-frame-label").inner_text() == FRAME_LABELS[frame], where
    slider = root.locator("input.attnx-slider")
    assert slider.input_value() == str(frame), where
    assert slider.get_attribute("aria-valuetext") == FRAME_LABELS[frame], where
    root.page.mouse.move(0, 0)  # leave, then hover: the readout reads the frame shown
    root.locator('.attnx-cell[data-q="5"][data-k="2"]').hover()
    expected = frame_matrix(frame, head)[5 * len(TOKENS) + 2]
    assert root.locator(".attnx-readout .attnx-rw").inner_text() == expected, where
    for h in range(WEIGHTS.shape[1]):  # each thumbnail shows this frame's head h
        thumb = root.locator(f'.attnx-thumb[data-head="{h}"]')
        index = (frame * WEIGHTS.shape[1] + h) * len(TOKENS) ** 2 + 5 * len(TOKENS)
        colour = _expected_colour(EMBEDDED, EMBEDDED["weights"][index])
        assert thumb.evaluate(THUMBNAIL_PIXEL, 5 * len(TOKENS)) == colour, f"{where}: thumb {h}"


def test_slider_and_keys_show_each_frames_weights(server, offline_page):
    page, blocked, errors = offline_page
    page.goto(server + "frames.html", wait_until="load")
    root = page.locator("div.attnx")
    assert root.get_attribute("data-attnx-ready") == "true", "the script did not start"
    slider = root.locator("input.attnx-slider")
    assert (slider.get_attribute("min"), slider.get_attribute("max")) == ("0", "3")
    shown(root, 0, 0)

    slider.fill("2")  # set the slider as a drag would, firing its input event
    shown(root, 2, 0)
    box = slider.bounding_box()  # click at the slider's right end: the last frame
    page.mouse.click(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    shown(root, 3, 0)

    slider.focus()  # the slider's own keys
    page.keyboard.press("ArrowLeft")
    shown(root, 2, 0)
    page.keyboard.press("Home")
    shown(root, 0, 0)

    root.locator('.attnx-thumb[data-head="1"]').click()  # a head keeps its frame...
    shown(root, 0, 1)
    root.locator(".attnx-heatmap").focus()  # ... and [ and ] step frames from the heatmap
    page.keyboard.press("]")
    page.keyboard.press("]")
    shown(root, 2, 1)
    page.keyboard.press("[")
    shown(root, 1, 1)
    for _ in range(5):  # past the ends it stays on the last frame
        page.keyboard.press("]")
    shown(root, 3, 1)

    # As tests/test_browser.py does on the book: Tab from the readout reaches the heatmap, so
    # the slider above it does not get in the way of the heatmap's keys.
    root.locator(".attnx-readout").click()
    page.keyboard.press("Tab")
    heatmap = root.locator(".attnx-heatmap")
    assert heatmap.evaluate("node => node === document.activeElement"), "Tab missed the heatmap"
    page.keyboard.press("ArrowDown")
    assert root.get_attribute("data-frame") == "3", "the heatmap's arrow keys moved the frame"
    assert not blocked, f"the explorer asked for something off this machine: {blocked}"
    assert not errors, f"console errors {errors}"


def test_without_frame_labels_there_is_no_slider(server, offline_page):
    page, blocked, errors = offline_page
    page.goto(server + "plain.html", wait_until="load")
    root = page.locator("div.attnx")
    assert root.get_attribute("data-attnx-ready") == "true"
    assert root.locator("input.attnx-slider").count() == 0
    assert root.evaluate(MATRIX) == frame_matrix(0, 0)
    root.locator(".attnx-heatmap").focus()
    page.keyboard.press("]")
    assert root.evaluate(MATRIX) == frame_matrix(0, 0)
    assert root.get_attribute("data-frame") == "0"
    assert not blocked and not errors, (blocked, errors)


def test_long_and_hostile_labels_stay_text_and_keep_the_heatmap_in_view(server, offline_page):
    page, blocked, errors = offline_page
    page.goto(server + "hostile.html", wait_until="load")
    root = page.locator("div.attnx")
    assert root.get_attribute("data-attnx-ready") == "true"
    assert page.evaluate("window.attacked") is None, "a label ran as code"
    assert root.locator("img, b:not(.attnx-rq):not(.attnx-rk):not(.attnx-rw), i").count() == 0
    labels = root.locator(".attnx-qlabel")
    assert labels.evaluate_all("nodes => nodes.map(n => n.textContent)") == HOSTILE
    assert labels.evaluate_all("nodes => nodes.map(n => n.title)") == HOSTILE

    grid = root.locator(".attnx-heatmap").bounding_box()
    assert grid["width"] < 600, f"a long label made the heatmap {grid['width']:.0f} px wide"
    assert grid["height"] < 800, f"a long label made the heatmap {grid['height']:.0f} px high"
    long_label = root.locator('.attnx-qlabel[title^="www"]')
    cut = long_label.evaluate(
        "n => [getComputedStyle(n).textOverflow, n.scrollWidth > n.clientWidth]"
    )
    assert cut == ["ellipsis", True], "the long label is not cut with an ellipsis"

    readout = root.locator(".attnx-readout")
    first_cell = root.locator(".attnx-cell").first
    on_page = "n => n.getBoundingClientRect().top + window.scrollY"
    top = first_cell.evaluate(on_page)
    assert top < 300, f"the title and labels push the heatmap {top:.0f} px down"
    for q in range(len(HOSTILE)):  # the readout shows each label whole, never over the cells
        page.mouse.move(0, 0)
        root.locator(f'.attnx-cell[data-q="{q}"][data-k="1"]').hover()
        assert first_cell.evaluate(on_page) == top, f"hovering query {q} moved the heatmap"
        assert (
            readout.locator(".attnx-rq").inner_text().replace("\n", "")
            == HOSTILE[q].replace("\u2028", "").replace("\u2029", "")
            or readout.locator(".attnx-rq").text_content() == HOSTILE[q]
        )
        assert readout.locator(".attnx-rq").text_content() == HOSTILE[q]
        bottom = readout.evaluate("n => n.getBoundingClientRect().bottom + window.scrollY")
        assert bottom <= top, f"the readout covers the cells (query {q})"
    for selector in (".attnx-thumb-name", ".attnx-frame-label", ".attnx-title", ".attnx-current"):
        width = root.locator(selector).first.bounding_box()["width"]
        assert width < 1280, f"{selector} is {width:.0f} px wide"
    assert root.locator(".attnx-frame-label").get_attribute("title") == LONG
    assert not blocked, f"the explorer asked for something off this machine: {blocked}"
    assert not errors, f"console errors {errors}"
