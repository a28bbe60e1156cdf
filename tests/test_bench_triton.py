"""The Triton bench section: on a machine without CUDA it says it needs a GPU."""

import hashlib
from importlib.resources import files

import pytest
import torch

from attnbook.bench import triton as triton_section


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the section runs")
def test_without_cuda_the_section_says_it_needs_a_gpu():
    text = triton_section.run(quick=True)
    assert text.splitlines()[0].startswith("Triton FlashAttention kernels")
    assert "skipped: this section needs a CUDA GPU" in text
    assert "ms" not in text  # no timing from the interpreter


def test_a_row_parses_back_to_what_was_formatted():
    cells = [(0.1, 2.0), (0.03, 2.0), None, (0.7, 10.0), (0.4, 14.0), None]
    row = triton_section.format_row("bfloat16", 128, 16384, cells)
    assert row.startswith("bfloat16 d=128 T=16384 ")
    parsed = triton_section.parse_row(row)
    assert (parsed["dtype"], parsed["head_dim"], parsed["length"]) == ("bfloat16", 128, 16384)
    assert parsed["forward"] == {"triton": (0.1, 2.0), "sdpa": (0.03, 2.0), "tiled": None}
    assert parsed["backward"] == {"triton": (0.7, 10.0), "sdpa": (0.4, 14.0), "tiled": None}


@pytest.mark.parametrize(
    "text",
    ["columns: triton, sdpa, tiled", "float16  d=64  T=1024  0.10 ms / 2 MiB | -"],
)
def test_other_text_is_refused_by_name(text):
    with pytest.raises(ValueError, match="row: expected a row of the Triton bench table"):
        triton_section.parse_row(text)


def test_a_malformed_cell_is_named():
    row = "float16  d=64  T=1024  " + " | ".join(["0.1 ms / 2 MiB"] * 5 + ["fast"])
    with pytest.raises(ValueError, match="got 'fast'"):
        triton_section.parse_row(row)


def test_the_shipped_gpu_run_is_the_full_table_and_its_verdict_is_its_own():
    """The shipped run covers every (dtype, d, T) of the full benchmark, tiled attention only
    up to TILED_MAX_LENGTH, and its target line states the worst ratio its rows give."""
    header, rows = triton_section.read_shipped_run()
    assert any("H200" in line for line in header)
    full = triton_section.FULL
    expected = [
        (str(dtype)[6:], d, n)
        for dtype in triton_section.DTYPES
        for d in full["head_dims"]
        for n in full["lengths"]
    ]
    assert [(row["dtype"], row["head_dim"], row["length"]) for row in rows] == expected
    for row in rows:
        ran_tiled = row["length"] <= triton_section.TILED_MAX_LENGTH
        assert (row["forward"]["tiled"] is not None) == ran_tiled
    longest = [row for row in rows if row["length"] == full["lengths"][-1]]
    worst = min(
        row[mode]["sdpa"][0] / row[mode]["triton"][0]
        for row in longest
        for mode in ("forward", "backward")
    )
    text = (files("attnbook.data") / triton_section.SHIPPED_RUN).read_text()
    met = "met" if worst >= triton_section.TARGET_SPEED else "NOT met"
    assert f"worst {worst:.2f}x, {met}" in text


def test_the_data_readme_states_the_shipped_runs_hash():
    data = files("attnbook.data")
    digest = hashlib.sha256((data / triton_section.SHIPPED_RUN).read_bytes()).hexdigest()
    assert f"sha256 `{digest}`" in (data / "README.md").read_text()


def test_a_rows_speed_fraction_and_forward_rate():
    cells = [(2.0, 2.0), (1.0, 2.0), None, (8.0, 10.0), (2.0, 14.0), None]
    row = triton_section.parse_row(triton_section.format_row("float16", 64, 1024, cells))
    assert triton_section.speed_fraction(row, "forward") == 0.5
    assert triton_section.speed_fraction(row, "backward") == 0.25
    # 2 * 8 heads * 1024^2 / 2 scores, 4 * 64 operations each, in 1 ms
    expected = 2 * 8 * 1024**2 / 2 * 4 * 64 / 1e-3 / 1e12
    assert triton_section.forward_tflops(row, "sdpa") == pytest.approx(expected)
    assert triton_section.forward_tflops(row, "triton") == pytest.approx(expected / 2)


def test_the_shipped_runs_longest_fractions_are_the_chapters():
    _, rows = triton_section.read_shipped_run()
    row = next(
        r for r in rows if (r["dtype"], r["head_dim"], r["length"]) == ("float16", 64, 16384)
    )
    assert triton_section.speed_fraction(row, "forward") == pytest.approx(1.29 / 3.00)
    assert triton_section.speed_fraction(row, "backward") == pytest.approx(4.50 / 9.60)


def test_a_mode_or_implementation_that_is_not_in_the_row_is_refused_by_name():
    _, rows = triton_section.read_shipped_run()
    long_row = rows[-1]  # T = 16384: tiled attention did not run
    with pytest.raises(ValueError, match="mode: expected one of"):
        triton_section.speed_fraction(long_row, "fwd")
    with pytest.raises(ValueError, match="name: expected an implementation timed in this row"):
        triton_section.forward_tflops(long_row, "tiled")


def test_the_backward_rate_counts_its_own_products_over_its_own_time():
    # forward 2 ms; forward + backward 9 ms: the backward alone took 7 ms
    cells = [(2.0, 2.0), (1.0, 2.0), None, (9.0, 10.0), (3.5, 14.0), None]
    row = triton_section.parse_row(triton_section.format_row("float16", 64, 1024, cells))
    forward = triton_section.forward_tflops(row, "triton")
    # 7 products in 7 ms, against 2 in 2 ms: the forward's rate
    assert triton_section.backward_tflops(row, "triton", 7) == pytest.approx(forward)
    # SDPA: 5 products in 2.5 ms, against the forward's 2 products in 1 ms
    sdpa = triton_section.forward_tflops(row, "sdpa")
    assert triton_section.backward_tflops(row, "sdpa", 5) == pytest.approx(sdpa)


def test_the_shipped_runs_backward_is_faster_than_its_forward_for_triton():
    """At T = 16384, float16, Triton's backward alone runs at 292 and 250 TFLOP/s (d = 64,
    128) against its forward's 183: the figures chapter 16 reads."""
    _, rows = triton_section.read_shipped_run()
    longest = {r["head_dim"]: r for r in rows if (r["dtype"], r["length"]) == ("float16", 16384)}
    rates = [triton_section.backward_tflops(longest[d], "triton", 7) for d in (64, 128)]
    assert [round(rate) for rate in rates] == [292, 250]
    assert all(rate > triton_section.forward_tflops(longest[64], "triton") for rate in rates)


@pytest.mark.parametrize("products", [0, 2.5, True])
def test_a_bad_product_count_is_refused_by_name(products):
    _, rows = triton_section.read_shipped_run()
    with pytest.raises(ValueError, match="products: expected a positive int"):
        triton_section.backward_tflops(rows[-1], "triton", products)


def test_a_backward_no_slower_than_the_forward_is_refused():
    cells = [(2.0, 2.0), (1.0, 2.0), None, (2.0, 10.0), (3.5, 14.0), None]
    row = triton_section.parse_row(triton_section.format_row("float16", 64, 1024, cells))
    with pytest.raises(ValueError, match="row: expected forward \\+ backward slower"):
        triton_section.backward_tflops(row, "triton", 7)
