"""The committed notebooks are what strict nbval and the book rely on: check their hygiene.

nbval compares only cells that were executed, so a notebook saved without outputs would pass
it silently; these checks make sure every chapter carries fresh, complete, clean outputs.
"""

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


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
            assert "/home/" not in text and "/root/" not in text, f"{path.name}: local path"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_shows_a_heatmap_and_a_shape_trace(path):
    outputs = [o for cell in code_cells(path) for o in cell["outputs"]]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name}: no figure"
    assert any(
        'class="shape-trace"' in "".join(o.get("data", {}).get("text/html", "")) for o in outputs
    ), f"{path.name}: no shape trace"
