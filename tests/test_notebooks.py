"""The committed notebooks are what strict nbval and the book rely on: check their hygiene.

nbval compares only cells that were executed, so a notebook saved without outputs would pass
it silently; these checks make sure every chapter carries fresh, complete, clean outputs.
"""

import base64
import json
import re
import socket
import struct
from pathlib import Path

import pytest
import yaml

from attnbook import exercises

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# Figures as a reader sees them: at least legible, at most a screen or two, and a light page.
PNG_PIXELS = (100, 2400)  # smallest and largest width or height
PNG_MAX_BYTES = 400_000
# Machine details that must not be committed in outputs or metadata: home folders, temp
# paths, installed packages' paths.
LOCAL_PATH = re.compile(r"/home/|/root/|/Users/|C:\\\\Users|/tmp/|/private/var/|site-packages")
# What leaks a machine or a person anywhere in a notebook, prose included: a home folder with a
# name in it (as JSON writes it, so a Windows backslash is doubled), a Jupyter kernel's
# connection file. Never a bare word: a login such as `reader` or `summary` is also prose.
LEAKS = re.compile(
    r"/home/[^/\s\"']+/|/Users/[^/\s\"']+/|[A-Za-z]:(\\\\)+Users(\\\\)+"
    r"|kernel-[0-9a-f]{8}-[0-9a-f-]+\.json|/jupyter/runtime/"
)


def leaks(text: str, checkout: str, hostname: str) -> list[str]:
    """What in ``text`` names this machine or someone's files: :data:`LEAKS`, the absolute
    path of this checkout, and the host name as a whole word (looked for in outputs and
    metadata only, where a machine writes it)."""
    found = [match.group() for match in LEAKS.finditer(text)]
    if checkout in text:
        found.append(checkout)
    if hostname and hostname != "localhost" and re.search(rf"\b{re.escape(hostname)}\b", text):
        found.append(hostname)
    return found


def without_images(outputs: list[dict]) -> list[dict]:
    """Outputs with their base64 images left out: a host name can occur there by chance."""
    return [
        {**output, "data": {k: v for k, v in output["data"].items() if not k.startswith("image/")}}
        if "data" in output
        else output
        for output in outputs
    ]


def code_cells(path: Path) -> list[dict]:
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc["parts"]:
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found under book/"


def test_every_notebook_is_in_the_table_of_contents():
    listed = set(toc_files())
    for path in NOTEBOOKS:
        assert f"book/{path.stem}" in listed, f"{path.name} is missing from _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_top_to_bottom(path):
    counts = [cell["execution_count"] for cell in code_cells(path)]
    assert None not in counts, f"{path.name}: cells never executed; run `make notebooks`"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not run top to bottom"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_clean(path):
    kernel = json.loads(path.read_text())["metadata"]["kernelspec"]["name"]
    assert kernel == "python3", f"{path.name}: kernelspec {kernel!r}, expected 'python3'"
    for cell in code_cells(path):
        ignored = "nbval-ignore-output" in cell["metadata"].get("tags", [])
        for output in cell["outputs"]:
            assert output["output_type"] != "error", f"{path.name}: saved an error"
            assert ignored or output.get("name") != "stderr", f"{path.name}: stderr in {cell}"
            text = json.dumps(output)
            match = LOCAL_PATH.search(text)
            assert match is None, f"{path.name}: local path {match and match.group()} in an output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_metadata_is_clean(path):
    notebook = json.loads(path.read_text())
    metadata = json.dumps(notebook["metadata"])
    assert "widgets" not in notebook["metadata"], f"{path.name}: widget state in the metadata"
    match = LOCAL_PATH.search(metadata)
    assert match is None, f"{path.name}: local path {match and match.group()} in the metadata"
    for cell in notebook["cells"]:
        cell_metadata = json.dumps(cell["metadata"])
        assert "widgets" not in cell["metadata"], f"{path.name}: widget state in a cell"
        assert LOCAL_PATH.search(cell_metadata) is None, f"{path.name}: local path in a cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_personal_or_machine_details(path):
    notebook = json.loads(path.read_text())
    generated = json.dumps(notebook["metadata"]) + json.dumps(
        [[cell["metadata"], without_images(cell.get("outputs", []))] for cell in notebook["cells"]]
    )
    sources = json.dumps([cell["source"] for cell in notebook["cells"]])
    found = leaks(generated, str(ROOT), socket.gethostname()) + leaks(sources, str(ROOT), "")
    assert not found, f"{path.name}: machine or personal details committed: {found}"


@pytest.mark.parametrize("login", ["reader", "summary", "will", "mark", "eric", "rose"])
def test_leak_check_finds_paths_not_words(login):
    """The check above flags where a name leaks, never the name as an ordinary word."""
    prose = json.dumps(f"a screen {login} describes; the {login} sees a numeric summary")
    assert leaks(prose, "/srv/checkout/attention", "") == []
    home = json.dumps(f"saved to /home/{login}/attention/book/x.png")
    mac = json.dumps(f"/Users/{login}/Library/x")
    windows = json.dumps(f"C:\\Users\\{login}\\attention")
    kernel = json.dumps("--f=/run/user/1000/jupyter/runtime/kernel-1a2b3c4d-5e6f-7a8b.json")
    for text in (home, mac, windows, kernel):
        assert leaks(text, "/srv/checkout/attention", ""), f"missed a leak in {text}"
    assert leaks('"in /srv/checkout/attention/book"', "/srv/checkout/attention", "") != []
    assert leaks('"ran on host build-7"', "/x", "build-7") == ["build-7"]
    assert leaks('"ran on host build-77"', "/x", "build-7") == []


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_figures_have_a_sensible_size(path):
    low, high = PNG_PIXELS
    for index, cell in enumerate(code_cells(path)):
        for output in cell["outputs"]:
            encoded = output.get("data", {}).get("image/png")
            if encoded is None:
                continue
            data = base64.b64decode("".join(encoded))
            width, height = png_size(data)
            where = f"{path.name}, code cell {index + 1}"
            assert low <= width <= high and low <= height <= high, (
                f"{where}: a {width} x {height} figure; keep each side within {low}-{high} px"
            )
            assert len(data) <= PNG_MAX_BYTES, (
                f"{where}: a {len(data):,}-byte PNG; keep figures under {PNG_MAX_BYTES:,} bytes"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_heatmaps_have_alt_text_and_a_caption(path):
    for index, cell in enumerate(code_cells(path)):
        source = "".join(cell["source"])
        has_image = any("image/png" in o.get("data", {}) for o in cell["outputs"])
        if not has_image or not re.search(r"\bplot_(attention|heads)\(", source):
            continue
        render = cell["metadata"].get("mystnb", {})
        where = f"{path.name}, code cell {index + 1}"
        assert render.get("image", {}).get("alt"), f"{where}: heatmap without mystnb.image.alt"
        assert render.get("figure", {}).get("caption"), (
            f"{where}: heatmap without mystnb.figure.caption"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_include_a_checker(path):
    """Each chapter's exercises include a visible cell that calls an attnbook checker (the stub,
    check and dropdown solution around it: tests/test_exercise_solutions.py)."""
    cells = json.loads(path.read_text())["cells"]
    headings = [i for i, c in enumerate(cells) if "## Exercises" in "".join(c["source"])]
    assert headings, f"{path.name}: no '## Exercises' section"
    after = [c for c in cells[headings[-1] :] if c["cell_type"] == "code"]
    called = [(c, re.findall(r"\b(check_\w+)\(", "".join(c["source"]))) for c in after]
    checks = [c for c, names in called if set(names) & set(exercises.__all__)]
    assert checks, f"{path.name}: no cell calling a checker from attnbook.exercises"
    assert all("hide-cell" not in c["metadata"].get("tags", []) for c in checks), (
        f"{path.name}: the checker cell must stay visible"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_shows_a_heatmap_and_a_shape_trace(path):
    outputs = [o for cell in code_cells(path) for o in cell["outputs"]]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name}: no figure"
    assert any(
        'class="shape-trace"' in "".join(o.get("data", {}).get("text/html", "")) for o in outputs
    ), f"{path.name}: no shape trace"


# A compared cell must not print a digit that depends on the CPU: a float error such as 3.6e-07
# differs between vector instruction sets (ATEN_CPU_CAPABILITY=default, avx2, avx512), and a
# magnitude below about 1e-5 printed as 0.0000036 is the same risk. A tolerance stated as a
# bound ("within 1e-12", "< 1e-06", "eps=1e-06") is the same everywhere; a measured magnitude
# goes in a cell tagged nbval-ignore-output, backed by an assertion.
TINY_MAGNITUDE = re.compile(r"\b[1-9](\.\d+)?e-(0[6-9]|[1-9]\d)\b|\b0\.0{5,}[1-9]\d*")
STATED_BOUND = re.compile(r"(within|below|under|<=?|≤|tolerance|atol|rtol|eps)\W{0,3}$", re.I)


def cpu_dependent_magnitudes(text: str) -> list[str]:
    """The tiny magnitudes ``text`` prints that are not stated as a bound."""
    return [
        match.group()
        for match in TINY_MAGNITUDE.finditer(text)
        if not STATED_BOUND.search(text[max(0, match.start() - 12) : match.start()])
    ]


def test_the_magnitude_check_flags_measurements_not_bounds():
    flagged = "max |flex - book| = 3.6e-07\ngradients ['3e-01', '1e-11']\nerror 0.0000036"
    assert cpu_dependent_magnitudes(flagged) == ["3.6e-07", "1e-11", "0.0000036"]
    bounds = "dq: every entry within 1e-12\nRMSNorm((12,), eps=1e-06)\nerror < 1e-06: True"
    assert cpu_dependent_magnitudes(bounds) == []
    assert cpu_dependent_magnitudes("loss 2.31, 4e-01 of the weight, 1e-05 < x") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_compared_cells_print_no_cpu_dependent_magnitudes(path):
    for index, cell in enumerate(code_cells(path)):
        if "nbval-ignore-output" in cell["metadata"].get("tags", []):
            continue
        for output in cell["outputs"]:
            shown = "".join(output.get("text", "")) + "".join(
                output.get("data", {}).get("text/plain", "")
            )
            found = cpu_dependent_magnitudes(shown)
            assert not found, (
                f"{path.name}, code cell {index + 1} is compared by nbval but prints {found}: "
                "such digits depend on the CPU. Print a verdict against a tolerance, and the "
                "raw value in a cell tagged nbval-ignore-output backed by an assertion"
            )
