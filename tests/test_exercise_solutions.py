"""Every checked exercise in the book starts from a stub, and its shown solution passes.

A chapter's exercise has three parts, in this order: the learner's cell (a stub that raises
``NotImplementedError``), the check cell (``check_<name>(<name>)``, whose committed output says
the exercise has not been attempted yet), and, after it, the reference solution inside a MyST
dropdown (a markdown cell ``:::{dropdown} ...`` holding one fenced ``python`` block). This
test runs each checker on the solution exactly as the book shows it.
"""

import contextlib
import io
import json
import linecache
import pathlib
import re

import pytest

from attnbook import exercises
from attnbook.kernels import runtime

BOOK = pathlib.Path(__file__).resolve().parents[1] / "book"
CHECK_CALL = re.compile(r"\b(check_\w+)\(\s*(\w+)\s*[,)]")
DROPDOWN = re.compile(r"^:::+\s*\{dropdown\}.*?^:::+\s*$", re.S | re.M)
PYTHON_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# What a solution may use without importing it: the names every chapter imports.
PRELUDE = """
import math
import torch
import torch.nn.functional as F
from torch import nn
from attnbook import *
"""


def _cells(notebook: pathlib.Path) -> list[dict]:
    return json.loads(notebook.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _checked_exercises() -> list[tuple[str, int, str, str]]:
    """(notebook, index of the check cell, checker name, name of the learner's function)."""
    found = []
    for notebook in sorted(BOOK.glob("[0-9][0-9]_*.ipynb")):
        for index, cell in enumerate(_cells(notebook)):
            if cell["cell_type"] != "code":
                continue
            for checker, answer in CHECK_CALL.findall(_source(cell)):
                if checker in exercises.__all__:
                    found.append((notebook.name, index, checker, answer))
    return found


def _defines(name: str, code: str) -> bool:
    return re.search(rf"^(def|class) {name}\b", code, re.M) is not None


def _solution_after(notebook: str, check_index: int, answer: str) -> str:
    for cell in _cells(BOOK / notebook)[check_index + 1 :]:
        if cell["cell_type"] != "markdown":
            continue
        for dropdown in DROPDOWN.findall(_source(cell)):
            for code in PYTHON_FENCE.findall(dropdown):
                if _defines(answer, code):
                    return code
    raise AssertionError(f"{notebook}: no dropdown after cell {check_index} defines {answer}")


def _learner_cell(notebook: str, check_index: int, answer: str) -> str:
    cells = _cells(BOOK / notebook)[:check_index]
    for cell in reversed(cells):
        if cell["cell_type"] == "code" and _defines(answer, _source(cell)):
            return _source(cell)
    raise AssertionError(f"{notebook}: no cell before cell {check_index} defines {answer}")


EXERCISES = _checked_exercises()
IDS = [f"{notebook}:{checker}" for notebook, _, checker, _ in EXERCISES]


def test_the_book_has_checked_exercises():
    assert len(EXERCISES) >= len(exercises.__all__) - 1


@pytest.mark.parametrize(("notebook", "index", "checker", "answer"), EXERCISES, ids=IDS)
def test_the_learner_starts_from_a_stub(notebook, index, checker, answer):
    assert "raise NotImplementedError" in _learner_cell(notebook, index, answer)


@pytest.mark.parametrize(("notebook", "index", "checker", "answer"), EXERCISES, ids=IDS)
def test_the_committed_check_says_not_attempted(notebook, index, checker, answer):
    outputs = _cells(BOOK / notebook)[index].get("outputs", [])
    printed = "".join("".join(o.get("text", "")) for o in outputs if o.get("name") == "stdout")
    assert printed.startswith("Not attempted yet:"), printed


@pytest.mark.parametrize(("notebook", "index", "checker", "answer"), EXERCISES, ids=IDS)
def test_the_shown_solution_passes_its_checker(notebook, index, checker, answer):
    code = PRELUDE + _solution_after(notebook, index, answer)
    if "import triton" in code and not runtime.has_triton_wheel():
        pytest.skip(f"triton has no wheel for {runtime.platform_name()}")
    # @triton.jit reads a kernel's source through inspect, as IPython lets it in a notebook:
    # register the code in linecache under a name of its own
    filename = f"<solution {notebook}:{index}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    namespace: dict = {}
    exec(compile(code, filename, "exec"), namespace)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        getattr(exercises, checker)(namespace[answer])
    assert printed.getvalue().startswith("Correct: "), printed.getvalue()
