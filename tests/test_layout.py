"""The library's layout: subpackages in layers, each importing only from its own layer or lower.

``ls src/attnbook`` is meant to show the architecture; this test keeps the picture true. A
module's imports of ``attnbook.<subpackage>`` are read from its source (not executed), so an
import inside a function counts as well.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnbook"

# Lower layers first; a module may import from its own layer and from the layers before it.
LAYERS = {
    "core": 0,
    "layers": 1,
    "efficient": 2,
    "kernels": 2,
    "linear": 2,
    "sparse": 2,
    "models": 3,
    "serving": 4,
    "analysis": 4,
    "book": 5,
    "exercises": 6,
    "bench": 7,
}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE)


def _subpackage(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0]


def _imported_subpackages(path: Path) -> set[str]:
    """The attnbook subpackages that ``path`` imports (``attnbook.data`` is data, not code)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "attnbook" and len(parts) > 1 and parts[1] != "data":
                found.add(parts[1])
    return found


def test_every_subpackage_has_a_layer():
    entries = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert entries <= set(LAYERS), f"a new subpackage needs a place in LAYERS: {entries}"


def test_the_package_folder_stays_small():
    entries = [p for p in PACKAGE.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 13, sorted(p.name for p in entries)
    too_long = [
        (str(p.relative_to(PACKAGE)), n)
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    ]
    assert not too_long, too_long


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path):
    own = LAYERS[_subpackage(path)]
    higher = {name for name in _imported_subpackages(path) if LAYERS.get(name, own + 1) > own}
    assert not higher, f"{path.relative_to(PACKAGE)} (layer {own}) imports {sorted(higher)}"


def test_the_layer_check_can_fail(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from attnbook.models.decoder import TinyDecoder\nimport attnbook.book\n")
    assert _imported_subpackages(module) == {"models", "book"}
