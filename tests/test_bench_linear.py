"""Chapter 18's benchmark rows run in quick mode and print their tables (timings unchecked)."""

from attnbook.bench import linear


def test_quick_linear_benchmark_prints_both_tables():
    output = linear.run(quick=True)
    assert "Decoding one token after T tokens" in output
    assert "Gated DeltaNet" in output and "softmax + KV cache" in output
    assert "not measured at this size" in output
    assert "Training step, forward + backward" in output and "chunked GDN" in output
