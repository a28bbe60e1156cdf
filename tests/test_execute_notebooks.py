"""scripts/execute_notebooks.py joins a cell's printing that the kernel flushed in pieces."""

import nbformat
from helpers import load_script


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def figure():
    return nbformat.v4.new_output("display_data", data={"text/plain": "<Figure>"})


def cell_with(*outputs):
    cell = nbformat.v4.new_code_cell("print('hi')")
    cell.outputs = list(outputs)
    return cell


def joined_outputs(*outputs):
    notebook = nbformat.v4.new_notebook(cells=[cell_with(*outputs)])
    load_script("execute_notebooks").join_stream_pieces(notebook)
    return [(o["output_type"], o.get("name"), o.get("text")) for o in notebook.cells[0].outputs]


def test_neighbouring_pieces_of_one_stream_become_one_output():
    assert joined_outputs(stream("a\n"), stream("b\n"), stream("c\n")) == [
        ("stream", "stdout", "a\nb\nc\n")
    ]


def test_text_never_moves_past_a_figure_or_into_another_stream():
    outputs = joined_outputs(
        stream("a\n"), figure(), stream("b\n"), stream("w\n", "stderr"), stream("c\n")
    )
    assert outputs == [
        ("stream", "stdout", "a\n"),
        ("display_data", None, None),
        ("stream", "stdout", "b\n"),
        ("stream", "stderr", "w\n"),
        ("stream", "stdout", "c\n"),
    ]


def test_markdown_cells_and_cells_without_output_are_left_alone():
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# title"), cell_with()]
    )
    load_script("execute_notebooks").join_stream_pieces(notebook)
    assert "outputs" not in notebook.cells[0] and notebook.cells[1].outputs == []
