"""Execute notebooks in place, top to bottom, so their saved outputs are the current code's.

Usage: python scripts/execute_notebooks.py [--jobs N] book/00_conventions.ipynb [more...]

`make notebooks` runs it on the committed chapters; `make book` on copies under _build/run, so
that building the book leaves the committed files as they are.

Each notebook runs in a fresh kernel with its own folder as the working directory, exactly as
nbval runs it in `make test`. A chapter this machine cannot run (chapter 16 without a Triton
wheel, on macOS or Windows) is left as it is, with its committed outputs, and says why. The
chapters are independent, so up to ``--jobs`` of them run at once (default: the number of CPU
cores), each kernel limited to its share of the cores so that together they never
oversubscribe the machine. One line per notebook is printed, with its time; what the kernels
write to stderr (start-up warnings) is kept back and shown only for a notebook that fails.
Timing metadata is not recorded, and neighbouring pieces of one stream are joined into one
output (a busy machine makes the kernel flush a cell's printing in pieces), so re-running an
unchanged notebook leaves its file unchanged apart from outputs that really vary (timings).
"""

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from attnbook.kernels.runtime import why_chapter_cannot_run

KERNEL = "python3"
TIMEOUT_SECONDS = 600


def join_stream_pieces(notebook: nbformat.NotebookNode) -> None:
    """Join each run of neighbouring stdout (or stderr) outputs of a cell into one output.

    Unlike nbclient's ``coalesce_streams``, text never moves past a figure between the pieces.
    """
    for cell in notebook.cells:
        joined = []
        for output in cell.get("outputs", []):
            previous = joined[-1] if joined else None
            same_stream = (
                previous is not None
                and output["output_type"] == previous["output_type"] == "stream"
                and output["name"] == previous["name"]
            )
            if same_stream:
                previous["text"] += output["text"]
            else:
                joined.append(output)
        if "outputs" in cell:
            cell.outputs = joined


def execute(path: Path, threads: int) -> tuple[float, str | None]:
    """Run one notebook in place; return (seconds, None) or (seconds, what went wrong)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)  # inherited by the kernel: torch's thread count
    with tempfile.TemporaryFile(mode="w+") as kernel_stderr:
        os.dup2(kernel_stderr.fileno(), 2)  # the kernel inherits this process's stderr
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            kernel_name=KERNEL,
            timeout=TIMEOUT_SECONDS,
            record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        start = time.perf_counter()
        try:
            client.execute()
        except Exception as error:  # a failing cell: report it with the kernel's stderr
            kernel_stderr.seek(0)
            return time.perf_counter() - start, f"{error}\n{kernel_stderr.read()}"
        seconds = time.perf_counter() - start
    join_stream_pieces(notebook)
    nbformat.write(notebook, path)
    return seconds, None


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    notebooks = []
    for path in args.notebooks:
        reason = why_chapter_cannot_run(path.name)
        if reason is None:
            notebooks.append(path)
        else:
            print(f"{path}: kept its committed outputs: it {reason}", flush=True)
    if not notebooks:
        return
    jobs = max(1, min(args.jobs, len(notebooks)))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    start, failed = time.perf_counter(), []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(execute, path, threads): path for path in notebooks}
        for future in as_completed(futures):
            seconds, problem = future.result()
            status = "executed" if problem is None else "FAILED"
            print(f"{futures[future]}: {status} in {seconds:.1f} s", flush=True)
            if problem is not None:
                failed.append(f"{futures[future]}: {problem}")
    print(
        f"{len(notebooks)} notebooks in {time.perf_counter() - start:.1f} s "
        f"({jobs} at a time, {threads} thread(s) each)",
        flush=True,
    )
    if failed:
        sys.exit("\n\n".join(failed))


if __name__ == "__main__":
    main(sys.argv[1:])
