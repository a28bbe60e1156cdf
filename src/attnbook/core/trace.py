"""Shape traces: a table of every named intermediate tensor of a forward pass.

Inside ``with trace_shapes() as trace:``, the library's functions and modules (and any code
that calls :func:`record`) append one row per step; outside it, :func:`record` does nothing.
The table prints as text, renders as HTML in a notebook, and answers ``trace[step]`` with the
shape so a notebook can assert it.
"""

import html
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from torch import Tensor

_active_trace: ContextVar["ShapeTrace | None"] = ContextVar("attnbook_trace", default=None)


@dataclass(frozen=True)
class TraceRow:
    step: str
    dims: str
    shape: tuple[int, ...]
    meaning: str


class ShapeTrace:
    """The rows recorded while a :func:`trace_shapes` block was active."""

    columns = ("step", "dims", "shape", "meaning")

    def __init__(self) -> None:
        self.rows: list[TraceRow] = []

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, step: str) -> tuple[int, ...]:
        """The shape recorded under ``step`` (the first such row if the step repeats)."""
        for row in self.rows:
            if row.step == step:
                return row.shape
        raise KeyError(f"no step {step!r} in this trace; steps are {self.steps}")

    @property
    def steps(self) -> list[str]:
        return [row.step for row in self.rows]

    def _cells(self) -> list[tuple[str, str, str, str]]:
        return [(r.step, r.dims, str(r.shape), r.meaning) for r in self.rows]

    def __repr__(self) -> str:
        table = [self.columns, *self._cells()]
        widths = [max(len(line[i]) for line in table) for i in range(len(self.columns))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in table
        ]
        return "\n".join(line.rstrip() for line in lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{name}</th>" for name in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>"
            for cells in self._cells()
        )
        return f'<table class="shape-trace"><tr>{head}</tr>{body}</table>'


@contextmanager
def trace_shapes() -> Iterator[ShapeTrace]:
    """Record the shapes of every step run inside the block; yields the :class:`ShapeTrace`."""
    trace = ShapeTrace()
    token = _active_trace.set(trace)
    try:
        yield trace
    finally:
        _active_trace.reset(token)


def record(step: str, tensor: Tensor, dims: str, meaning: str = "") -> None:
    """Add a row to the active trace, if there is one.

    ``dims`` names the axes in the book's notation, separated by spaces, e.g. ``"B H T d_head"``;
    a leading ``"..."`` stands for any number of batch dims. A ``dims`` that does not fit the
    tensor's rank is a bug in the caller and raises ``ValueError``.
    """
    trace = _active_trace.get()
    if trace is None:
        return
    names = dims.split()
    has_batch = bool(names) and names[0] == "..."
    named = len(names) - has_batch
    if tensor.dim() < named or (not has_batch and tensor.dim() != named):
        raise ValueError(
            f"dims: {dims!r} does not fit step {step!r} of shape {tuple(tensor.shape)}"
        )
    trace.rows.append(TraceRow(step, "(" + ", ".join(names) + ")", tuple(tensor.shape), meaning))
