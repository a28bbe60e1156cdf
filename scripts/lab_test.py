"""Check once that the attention explorer works inside JupyterLab 4 (`make lab-test`).

Starts `jupyter lab` on a free port of 127.0.0.1 with a random token, in a temporary folder
holding copies of an executed chapter, with its own Jupyter data and settings folders (so the
reader's notebook signatures, settings and workspaces are left alone). Debian's Chromium, driven
by Playwright, then checks the three cases a reader meets:

1. the saved notebook as it comes (untrusted, its outputs saved elsewhere): JupyterLab strips the
   script, and the explorer's one-sentence explanation is shown instead;
2. the same notebook trusted (`jupyter trust`): the saved explorer runs;
3. the untrusted notebook after running all cells in a kernel: the fresh output is trusted, the
   explorer runs, and hovering a cell shows the weight the page embeds;
4. MyST in markdown cells, rendered by jupyterlab-myst as in the book: a small notebook with a
   dropdown (folded: its answer is hidden until clicked), an admonition and a {doc} reference
   must show no raw markup.

Requests to other machines are blocked. This is not part of `make test`: it starts a server and
a kernel and takes about a minute, and it checks JupyterLab's behaviour rather than the book's.
Usage: python scripts/lab_test.py [book/00_conventions.ipynb]
"""

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
# The same names, in the same order, as the Makefile's CHROMIUM_NAMES.
CHROMIUM_NAMES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"]
CHROMIUM = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), "")
NOTEBOOK = ROOT / "book" / "00_conventions.ipynb"
START_SECONDS = 60
TIMEOUT_MS = 60_000


# Run all queues every cell at once ("[*]"), so once the explorer's cell has run, the last
# queued cell finishing means the notebook is done.
ALL_CELLS_RUN = """() => ![...document.querySelectorAll(".jp-CodeCell .jp-InputPrompt")]
    .some(prompt => prompt.textContent.includes("*"))"""


# The MyST a chapter uses, one construct per markdown cell (the book's solutions are dropdowns).
MYST_CELLS = [
    ":::{dropdown} Solution to exercise 1\nThe hidden answer: MYST-ANSWER.\n:::",
    ":::{note}\nAn admonition: MYST-NOTE.\n:::",
    "As {doc}`untrusted_00_conventions` shows, weights sum to $1$.",
]
RAW_MYST = [":::", "{dropdown}", "{note}", "{doc}", "`untrusted_"]
MYST_PARTS = ["admonition", "doc_link", "math"]

KERNEL_IDLE = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const kernel = panel && panel.sessionContext && panel.sessionContext.session
        && panel.sessionContext.session.kernel;
    return kernel && kernel.status === "idle";
}"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_server(url: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"jupyter lab did not answer {url} within {START_SECONDS} s")


@contextlib.contextmanager
def running_lab(work: Path, home: Path, port: int, token: str, env: dict):
    """`jupyter lab` serving ``work`` on 127.0.0.1:``port``; stopped (and waited for) on exit."""
    command = [
        Path(sys.executable).parent / "jupyter",
        "lab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={work}",
        "--LabApp.expose_app_in_browser=True",
    ] + (["--allow-root"] if os.geteuid() == 0 else [])
    with open(home / "server.log", "w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_server(f"http://127.0.0.1:{port}/api/status?token={token}", server)
            yield
        except RuntimeError:
            print((home / "server.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def explorer_state(page) -> dict:
    """Whether the first explorer started, and whether its no-script sentence is visible."""
    root = page.locator(".jp-OutputArea-output .attnx").first
    root.wait_for(state="attached")
    return root.evaluate(
        """root => {
            root.scrollIntoView();  /* JupyterLab skips drawing cells out of view */
            const fallback = root.querySelector(".attnx-fallback");
            return {ready: root.dataset.attnxReady === "true",
                    fallback: fallback !== null && fallback.offsetParent !== null,
                    cells: root.querySelectorAll(".attnx-cell").length};
        }"""
    )


def offline_context(browser) -> tuple:
    """A browser context whose requests to anything but 127.0.0.1 are aborted and listed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []

    def route(request_route):
        if urlparse(request_route.request.url).hostname == "127.0.0.1":
            request_route.continue_()
        else:
            blocked.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    return context, blocked


def check_notebook(browser, base: str, token: str, name: str, run_all: bool) -> dict:
    context, blocked = offline_context(browser)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    workspace = name.split("_")[0]  # one per case: no notebook of another case is restored
    page.goto(
        f"{base}lab/workspaces/{workspace}/tree/{name}?token={token}&reset", wait_until="load"
    )
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    if run_all:
        page.locator(".jp-Notebook .jp-Cell").first.click()  # the notebook becomes current
        page.wait_for_function(
            "() => window.jupyterapp.commands.isEnabled('notebook:run-all-cells')"
        )
        page.wait_for_function(KERNEL_IDLE)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.locator(".jp-OutputArea-output .attnx[data-attnx-ready='true']").first.wait_for(
            state="attached"
        )
        page.wait_for_function(ALL_CELLS_RUN)
    state = explorer_state(page)
    if state["ready"]:
        root = page.locator(".jp-OutputArea-output .attnx").first
        data = root.evaluate(
            "root => JSON.parse(root.querySelector('script.attnx-data').textContent)"
        )
        cell = root.locator('.attnx-cell[data-q="2"][data-k="1"]')
        cell.evaluate("node => node.scrollIntoView({block: 'center'})")
        page.wait_for_timeout(1000)  # JupyterLab lays out the cells around the new position
        box = cell.evaluate("node => JSON.parse(JSON.stringify(node.getBoundingClientRect()))")
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        shown = root.locator(".attnx-readout .attnx-rw").inner_text()
        index = 2 * data["keys"] + 1
        state["hover_ok"] = shown == f"{data['weights'][index] / 10 ** data['decimals']:.3f}"
        state["screenshot"] = str(Path(base_screenshots(), f"lab_{name[:-6]}.png"))
        root.screenshot(path=state["screenshot"])
    if run_all:
        page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
    state["blocked"] = blocked
    context.close()
    return state


def myst_notebook() -> dict:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": text} for text in MYST_CELLS]
    return {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def check_myst(browser, base: str, token: str, name: str) -> dict:
    """How JupyterLab shows :data:`MYST_CELLS`: raw markup left, the dropdown folded and
    opening on a click, the admonition drawn as one."""
    from playwright.sync_api import Error as PlaywrightError

    context, blocked = offline_context(browser)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{base}lab/workspaces/myst/tree/{name}?token={token}&reset", wait_until="load")
    cells = page.locator(".jp-MarkdownCell .myst")  # what jupyterlab-myst renders
    try:
        cells.nth(len(MYST_CELLS) - 1).wait_for(timeout=20_000)
    except PlaywrightError:
        context.close()
        return {"raw": ["no MyST rendering: is jupyterlab-myst installed and enabled?"]}
    text = page.locator(".jp-Notebook").inner_text()
    dropdown = cells.nth(0).locator("details.myst-dropdown")
    answer = dropdown.locator(".myst-dropdown-body", has_text="MYST-ANSWER")
    result = {
        "raw": [marker for marker in RAW_MYST if marker in text],
        "dropdown": dropdown.count() == 1,
        "folded": "MYST-ANSWER" not in text and not answer.is_visible(),
        "admonition": cells.nth(1).locator(".myst-admonition").count() == 1,
        "doc_link": cells.nth(2).locator("a", has_text="untrusted_00_conventions").count() == 1,
        "math": cells.nth(2).locator(".katex").count() > 0,
    }
    if result["dropdown"]:
        dropdown.locator("summary").click()
        answer.wait_for(state="visible")
        result["opens"] = "MYST-ANSWER" in page.locator(".jp-Notebook").inner_text()
    page.screenshot(path=base_screenshots() / "lab_myst.png")
    result["blocked"] = blocked
    context.close()
    return result


def base_screenshots() -> Path:
    folder = ROOT / "_build" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    source = Path(argv[0]) if argv else NOTEBOOK
    token, port = secrets.token_hex(16), free_port()
    base = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryDirectory(prefix="attnbook-lab-") as tmp:
        work, home = Path(tmp, "notebooks"), Path(tmp, "jupyter")
        work.mkdir()
        news = home / "settings" / "@jupyterlab" / "apputils-extension"
        news.mkdir(parents=True)
        (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        env = dict(
            os.environ,
            JUPYTER_DATA_DIR=str(home / "data"),
            JUPYTER_RUNTIME_DIR=str(home / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
            OMP_NUM_THREADS="1",
        )
        names = {case: f"{case}_{source.name}" for case in ("untrusted", "trusted", "run")}
        notebook = json.loads(source.read_text())
        for case, name in names.items():
            # Trust is a signature of the whole file: make each copy differ from the others.
            notebook["metadata"]["attnbook_lab_test"] = case
            (work / name).write_text(json.dumps(notebook))
        (work / "myst.ipynb").write_text(json.dumps(myst_notebook()))
        subprocess.run(
            [Path(sys.executable).parent / "jupyter", "trust", work / names["trusted"]],
            env=env,
            check=True,
            capture_output=True,
        )
        with running_lab(work, home, port, token, env), sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox"]
            )
            results = {
                case: check_notebook(browser, base, token, name, run_all=case == "run")
                for case, name in names.items()
            }
            results["myst"] = check_myst(browser, base, token, "myst.ipynb")
            browser.close()
    print(json.dumps(results, indent=1))
    failures = []
    if results["untrusted"]["ready"] or not results["untrusted"]["fallback"]:
        failures.append("untrusted: expected the script stripped and the sentence shown")
    for case in ("trusted", "run"):
        if not (results[case]["ready"] and not results[case]["fallback"]):
            failures.append(f"{case}: the explorer did not start")
        elif not results[case]["hover_ok"]:
            failures.append(f"{case}: hovering a cell did not show its weight")
    myst = results["myst"]
    if myst["raw"]:
        failures.append(f"myst: raw markup shown in JupyterLab: {myst['raw']}")
    elif not (myst["dropdown"] and myst["folded"] and myst.get("opens")):
        failures.append(f"myst: the dropdown is not a folded one that opens: {myst}")
    failures += [f"myst: no {part} rendered" for part in MYST_PARTS if not myst.get(part, True)]
    failures += [
        f"{case}: asked for {r['blocked']}" for case, r in results.items() if r.get("blocked")
    ]
    for line in failures:
        print("FAILED", line)
    if not failures:
        print(
            f"JupyterLab renders the explorer of {source.name}: untrusted -> sentence, "
            "trusted and after running -> explorer; MyST dropdowns (folded), admonitions and "
            "{doc} references render"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
