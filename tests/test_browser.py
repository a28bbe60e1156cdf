"""The rendered book as a reader sees it: every page in headless Chromium, offline.

Serves ``_build/html`` on 127.0.0.1 and blocks every other request, so a page that needs a CDN
fails here. For each page of the table of contents: no console errors, every image loaded,
math typeset by the bundled MathJax (no raw TeX left), code cells and outputs on chapter pages,
a sidebar that links to every page; the search page finds "attention". A screenshot of each
page's first screen goes to ``_build/screenshots/`` (a full-page one costs about 3 s a page,
most of the test's time).

Needs a Chromium or Chrome: ``CHROMIUM`` names one, else the first of :data:`CHROMIUM_NAMES`
on PATH, the Makefile's lookup (``make test`` installs Debian's ``chromium`` when it runs as
root and finds none), and Playwright for Python, driving that browser: no browser is
downloaded. Skipped, with the reason, when either is missing or the book has not been built,
except where the environment sets ``CI`` (``true`` or ``1``): there it fails instead, so a CI
run cannot pass without checking the book in a browser. ``ATTNBOOK_HTML`` points it at another
build.
"""

import contextlib
import functools
import http.server
import math
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("ATTNBOOK_HTML", ROOT / "_build" / "html"))
SCREENSHOTS = HTML.parent / "screenshots"
# The same names, in the same order, as the Makefile's CHROMIUM_NAMES.
CHROMIUM_NAMES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"]
CHROMIUM = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), "")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# a page's load: generous, since the test shares a 2-core machine with executing notebooks
# (one load took over 30 s there while a chapter executed beside the suite)
TIMEOUT_MS = 90_000


def toc_pages() -> list[str]:
    """The pages of the table of contents, as paths relative to the HTML root."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    return [f"{name}.html" for name in files]


PAGES = toc_pages()


def _skip_reason() -> str | None:
    if not (HTML / "index.html").exists():
        return f"the book is not built ({HTML} has no index.html): run `make test` or `make book`"
    if not CHROMIUM:
        return (
            f"no Chromium or Chrome found (CHROMIUM is not set; none of {CHROMIUM_NAMES} is on "
            "PATH): install one (Debian/Ubuntu: `apt install chromium`; `make test` does it "
            "when run as root), or point CHROMIUM at any Chromium or Chrome, e.g. "
            "`make test CHROMIUM=/path/to/chrome`"
        )
    if not Path(CHROMIUM).is_file():
        return f"CHROMIUM={CHROMIUM} is not a file: point it at a Chromium or Chrome executable"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: `pip install -r requirements.txt`"
    return None


SKIP_REASON = _skip_reason()
if SKIP_REASON is not None and os.environ.get("CI", "").lower() in ("1", "true"):
    pytest.fail(f"CI is set, so the browser test must run, but {SKIP_REASON}", pytrace=False)
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002
        pass


@contextlib.contextmanager
def serving(directory: Path):
    """A static HTTP server for ``directory`` on a free loopback port; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server():
    with serving(HTML) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Playwright starts Chromium with a fresh temporary --user-data-dir of its own.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def offline_page(browser):
    """A page whose requests to anything but 127.0.0.1 are aborted and recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    blocked: list[str] = []
    errors: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if urlparse(url).hostname == "127.0.0.1" or url.startswith(("data:", "blob:")):
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    context.route("**/*", route)
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    yield page, blocked, errors
    context.close()


WAIT_FOR_IMAGES_AND_MATH = """async () => {
    for (const img of document.images) { img.loading = "eager"; }
    await Promise.all([...document.images].map(img => img.complete ? null :
        new Promise(done => { img.onload = img.onerror = done; })));
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;
    }
}"""

PAGE_FACTS = """() => {
    const main = document.querySelector("main") || document.body;
    const prose = main.cloneNode(true);
    prose.querySelectorAll("pre, code, script, style, mjx-container, .highlight, textarea")
        .forEach(node => node.remove());
    return {
        images: [...document.images].map(img => ({
            src: img.getAttribute("src"), alt: img.alt, complete: img.complete,
            width: img.naturalWidth, height: img.naturalHeight})),
        mathSources: main.querySelectorAll(".math, span.math, div.math").length,
        typeset: main.querySelectorAll("mjx-container").length,
        mathjaxScripts: [...document.scripts].map(s => s.src).filter(s => /mathjax/i.test(s)),
        prose: prose.innerText,
        codeCells: main.querySelectorAll("div.cell").length,
        outputs: main.querySelectorAll("div.cell_output").length,
        sidebar: [...document.querySelectorAll("nav.bd-docs-nav a.reference.internal,"
            + " .bd-sidebar-primary a.reference.internal")].map(a => a.href),
        wideCode: [...main.querySelectorAll("div.cell_input pre")]
            .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
            .map(pre => pre.textContent.split("\\n")[0].slice(0, 60)),
        topBars: [...document.querySelectorAll("header.bd-header")]
            .filter(bar => bar.getBoundingClientRect().height > 0).length,
    };
}"""

RAW_TEX = ["\\(", "\\)", "\\[", "\\]", "$$", "\\frac", "\\sqrt", "\\mathrm", "\\top"]


def _layer_and_head(thumb) -> tuple[int, int]:
    return int(thumb.get_attribute("data-layer")), int(thumb.get_attribute("data-head"))


def _same_page(url: str) -> str:
    return urlparse(url).path.lstrip("/")


@pytest.mark.parametrize("page_path", PAGES)
def test_page_reads_offline(server, offline_page, page_path):
    page, blocked, errors = offline_page
    response = page.goto(server + page_path, wait_until="load")
    assert response is not None and response.ok, f"{page_path}: HTTP {response and response.status}"
    page.evaluate(WAIT_FOR_IMAGES_AND_MATH)
    facts = page.evaluate(PAGE_FACTS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / (page_path.replace("/", "_")[:-5] + ".png"))

    assert not blocked, f"{page_path} asked for something off this machine: {blocked}"
    assert not errors, f"{page_path}: console errors {errors}"
    broken = [img["src"] for img in facts["images"] if not img["complete"] or img["width"] == 0]
    assert not broken, f"{page_path}: images that did not load: {broken}"
    if facts["mathSources"]:
        assert facts["mathjaxScripts"], f"{page_path} has math but loads no MathJax"
        assert all(src.startswith(server) for src in facts["mathjaxScripts"]), (
            f"{page_path}: MathJax must come from the book itself, not {facts['mathjaxScripts']}"
        )
        assert facts["typeset"] >= facts["mathSources"], (
            f"{page_path}: {facts['mathSources']} math elements but only {facts['typeset']} "
            "typeset by MathJax"
        )
    raw = [tex for tex in RAW_TEX if tex in facts["prose"]]
    assert not raw, f"{page_path}: raw TeX {raw} visible in the text; is MathJax loading?"
    if Path(page_path).stem[:2].isdigit():
        assert facts["codeCells"] > 0, f"{page_path}: no code cells on a chapter page"
        assert facts["outputs"] > 0, f"{page_path}: no cell outputs on a chapter page"
        assert facts["images"], f"{page_path}: no figure on a chapter page"
        undescribed = [img["src"] for img in facts["images"] if not img["alt"].strip()]
        assert not undescribed, f"{page_path}: figures without alt text: {undescribed}"
    # At 1280 px (the viewport above), book/_static/attnbook.css and the pinned theme pair.
    assert not facts["wideCode"], f"{page_path}: code scrolls sideways: {facts['wideCode']}"
    assert facts["topBars"] == 0, f"{page_path}: a top bar above the book's header (theme?)"
    linked = {_same_page(url) for url in facts["sidebar"]}
    missing = [p for p in PAGES if p not in linked and p != "book/intro.html"]
    assert not missing, f"{page_path}: the sidebar has no link to {missing}"


def test_notation_table_fits_a_phone(server, browser):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(server + "book/intro.html", wait_until="load")
    table = page.locator("main table").first
    table.scroll_into_view_if_needed()
    fits = table.evaluate(
        "t => t.getBoundingClientRect().right <= window.innerWidth"
        " && t.scrollWidth <= t.parentElement.clientWidth"
    )
    page.screenshot(path=SCREENSHOTS / "intro_notation_390px.png")
    context.close()
    assert fits, "the intro's notation table is clipped at 390 px"


def test_search_finds_attention(server, offline_page):
    page, blocked, errors = offline_page
    page.goto(server + "search.html?q=attention", wait_until="load")
    # Sphinx adds results one at a time; its summary line appears once the search is done.
    summary = page.locator("#search-results p.search-summary", has_text="Search finished")
    summary.wait_for(state="attached")
    results = page.locator("#search-results ul.search li")
    found = {_same_page(a) for a in results.locator("a").evaluate_all("l => l.map(a => a.href)")}
    page.screenshot(path=SCREENSHOTS / "search.png")
    assert not blocked, f"the search page asked for something off this machine: {blocked}"
    assert not errors, f"search page: console errors {errors}"
    chapters = [p for p in PAGES if Path(p).stem[:2].isdigit()]
    assert len(found & set(chapters)) >= len(chapters) // 2, (
        f"searching 'attention' found only {sorted(found)}"
    )


def test_sidebar_link_opens_the_next_chapter(server, offline_page):
    page, blocked, errors = offline_page
    page.goto(server + PAGES[0], wait_until="load")
    target = PAGES[1]
    page.locator(f'.bd-sidebar-primary a[href$="{Path(target).name}"]').first.click()
    page.wait_for_load_state("load")
    assert _same_page(page.url) == target, f"clicking the sidebar link went to {page.url}"
    assert not blocked and not errors, (blocked, errors)


def explorer_pages() -> list[str]:
    """The pages of the built book that carry an attention explorer (attnbook.book.explore)."""
    return [p for p in PAGES if (HTML / p).exists() and 'class="attnx"' in (HTML / p).read_text()]


EXPLORER_PAGES = explorer_pages()
# Pages that print a weight the explorer also shows: (query row, key column, printed text).
PRINTED_WEIGHTS = {"book/00_conventions.html": (2, 1, r"weight of 'sat' on 'cat': ([0-9.]+)")}

EXPLORER_FACTS = """root => {
    const data = JSON.parse(root.querySelector("script.attnx-data").textContent);
    const fallback = root.querySelector(".attnx-fallback");
    return {data, ready: root.dataset.attnxReady, fallbackShown: fallback.offsetParent !== null,
            cells: root.querySelectorAll(".attnx-cell").length,
            thumbs: root.querySelectorAll(".attnx-thumb").length};
}"""
MATRIX = """root => [...root.querySelectorAll(".attnx-cell")].map(cell => cell.dataset.weight)"""


def _expected_weight(data: dict, layer: int, head: int, q: int, k: int) -> str:
    """The weight the page embeds for one cell, written to 3 decimals as the page writes it."""
    index = ((layer * data["heads"] + head) * data["queries"] + q) * data["keys"] + k
    return f"{data['weights'][index] / 10 ** data['decimals']:.3f}"


def _expected_colour(data: dict, weight: int) -> str:
    """The CSS colour of a cell: the colormap's stop for weight / largest weight, as rgb()."""
    top, stops = max(max(data["weights"]), 1), len(data["colours"])
    stop = math.floor(weight / top * (stops - 1) + 0.5)  # JavaScript's Math.round
    hex_colour = data["colours"][min(stops - 1, stop)]
    red, green, blue = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def _head_matrix(data: dict, layer: int, head: int) -> list[str]:
    return [
        _expected_weight(data, layer, head, q, k)
        for q in range(data["queries"])
        for k in range(data["keys"])
    ]


def test_the_book_has_explorers():
    assert EXPLORER_PAGES, f"no page of {HTML} has an attention explorer"


@pytest.mark.parametrize("page_path", EXPLORER_PAGES)
def test_explorer_works_offline(server, offline_page, page_path):
    page, blocked, errors = offline_page
    page.goto(server + page_path, wait_until="load")
    roots = page.locator("div.attnx")
    assert roots.count() > 0, f"{page_path}: no explorer"
    for n in range(roots.count()):
        root = roots.nth(n)
        root.scroll_into_view_if_needed()
        where = f"{page_path}, explorer {n}"
        facts = root.evaluate(EXPLORER_FACTS)
        data = facts["data"]
        queries, keys = data["queries"], data["keys"]
        assert facts["ready"] == "true", f"{where}: the script did not start"
        assert not facts["fallbackShown"], f"{where}: the no-script sentence is still shown"
        assert facts["cells"] == queries * keys
        n_heads = data["layers"] * data["heads"]
        assert facts["thumbs"] == (n_heads if n_heads > 1 else 0), f"{where}: thumbnails"

        # Hovering a cell shows its query, key and the embedded weight to 3 decimals.
        readout = root.locator(".attnx-readout")
        for q, k in [(queries - 1, keys // 2), (queries // 2, 0)]:
            root.locator(f'.attnx-cell[data-q="{q}"][data-k="{k}"]').hover()
            expected = _expected_weight(data, 0, 0, q, k)
            assert readout.locator(".attnx-rw").inner_text() == expected, f"{where}: ({q}, {k})"
            assert readout.locator(".attnx-rq").inner_text() == data["queryTokens"][q]
            assert readout.locator(".attnx-rk").inner_text() == data["keyTokens"][k]
        assert root.evaluate(MATRIX) == _head_matrix(data, 0, 0), f"{where}: wrong matrix"
        colour = root.locator('.attnx-cell[data-q="0"][data-k="0"]').evaluate(
            "cell => getComputedStyle(cell).backgroundColor"
        )
        assert colour == _expected_colour(data, data["weights"][0]), f"{where}: colour scale"
        if page_path in PRINTED_WEIGHTS and n == 0:
            q, k, pattern = PRINTED_WEIGHTS[page_path]
            printed = re.search(pattern, page.locator("main").inner_text())
            assert printed, f"{page_path}: the printed weight {pattern!r} is not on the page"
            root.locator(f'.attnx-cell[data-q="{q}"][data-k="{k}"]').hover()
            shown = readout.locator(".attnx-rw").inner_text()
            assert shown == printed.group(1), f"{where}: shows {shown}, prints {printed.group(1)}"

        # Hovering a query token in the token view leaves only that query's lines.
        root.locator(f'.attnx-tq[data-q="{queries - 1}"]').hover()
        shown_groups = root.locator(".attnx-links g").evaluate_all(
            "groups => groups.filter(g => g.style.display !== 'none').map(g => g.dataset.q)"
        )
        assert shown_groups == [str(queries - 1)], f"{where}: token view shows {shown_groups}"

        # Clicking another head's thumbnail changes the matrix to that head's weights.
        if facts["thumbs"] > 1:
            before = root.evaluate(MATRIX)
            thumbs = root.locator(".attnx-thumb")
            # a head whose weights differ from the one shown (heads can be equal by design)
            thumb = next(
                thumbs.nth(i)
                for i in range(1, thumbs.count())
                if _head_matrix(data, *_layer_and_head(thumbs.nth(i))) != before
            )
            layer, head = _layer_and_head(thumb)
            thumb.click()
            assert thumb.get_attribute("aria-pressed") == "true"
            assert root.get_attribute("data-head") == str(head)
            after = root.evaluate(MATRIX)
            assert after == _head_matrix(data, layer, head), f"{where}: not head {head}'s weights"
            assert after != before, f"{where}: clicking head {head} left the matrix as it was"

        # Keyboard: Tab into the heatmap (visible focus), arrow keys move the selected cell. The
        # page may first stop on the output that holds the explorer, and a frame slider comes
        # before the heatmap, so Tab may take up to three presses.
        root.locator(".attnx-readout").click()
        heatmap = root.locator(".attnx-heatmap")
        for _ in range(3):
            page.keyboard.press("Tab")
            if heatmap.evaluate("node => node === document.activeElement"):
                break
        assert heatmap.evaluate("node => node === document.activeElement"), f"{where}: no Tab in"
        assert heatmap.get_attribute("aria-label"), f"{where}: heatmap has no aria-label"
        outline = heatmap.evaluate("node => getComputedStyle(node).outlineStyle")
        assert outline != "none", f"{where}: no visible focus on the heatmap"
        assert (root.get_attribute("data-query"), root.get_attribute("data-key")) == ("0", "0")
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowRight")
        assert (root.get_attribute("data-query"), root.get_attribute("data-key")) == ("1", "1")
        assert readout.locator(".attnx-rq").inner_text() == data["queryTokens"][1]
        page.keyboard.press("ArrowUp")
        assert root.get_attribute("data-query") == "0", f"{where}: ArrowUp did not move up"

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.mouse.move(0, 0)
    roots.first.screenshot(path=SCREENSHOTS / f"explorer_{Path(page_path).stem}.png")
    assert not blocked, f"{page_path}: the explorer asked for something off this machine: {blocked}"
    assert not errors, f"{page_path}: console errors {errors}"
