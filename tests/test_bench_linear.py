"""Chapter 18's benchmark rows run in quick mode and print their tables (timings unchecked)."""

from attnbook.bench import linear


def test_quick_linear_benchmark_prints_both_tables():
    output = linear.run(quick=True)
    assert "Decoding one token after T tokens" in output
    assert "Gated DeltaNet" in output and "softmax + KV cache" in output
    assert "not measured at this size" in output
    assert "Training step, forward + backward" in output and "chunked GDN" in output
    assert "explicit softmax" in output and "fused SDPA" in output


def test_training_seconds_times_three_forms():
    times = linear.training_seconds(64, repeats=1)
    assert len(times) == 3 and all(t > 0 for t in times)


def test_decode_seconds_times_every_length_after_its_own_prompt():
    layer = linear.GatedDeltaNet(linear.D_MODEL, linear.N_HEADS)
    times = linear.decode_seconds(layer, (8, 16, 32), steps=2)
    assert len(times) == 3 and all(t > 0 for t in times)
