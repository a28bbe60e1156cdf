"""Execute notebooks in place, top to bottom, so their saved outputs are the current code's.

Usage: python scripts/execute_notebooks.py book/00_conventions.ipynb [more notebooks...]

Each notebook runs in a fresh kernel with its own folder as the working directory, exactly as
nbval runs it in `make test`. Timing metadata is not recorded, so re-running an unchanged
notebook leaves its file unchanged apart from outputs that really vary (timings).
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL = "python3"
TIMEOUT_SECONDS = 600


def execute(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=KERNEL,
        timeout=TIMEOUT_SECONDS,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(notebook, path)
    return seconds


def main(paths: list[str]) -> None:
    if not paths:
        sys.exit("usage: execute_notebooks.py NOTEBOOK.ipynb [...]")
    for name in paths:
        print(f"{name}: executed in {execute(Path(name)):.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
