"""The serving benchmark's quick path runs and prints both rows with their verdicts."""

from attnbook.bench import serving


def test_quick_serving_bench_prints_both_rows():
    text = serving.run(quick=True)
    assert "KV memory holding tokens" in text and "continuous vs static" in text
    assert "same tokens True" in text
    verdicts = [line for line in text.splitlines() if line.startswith("target:")]
    assert len(verdicts) == 2
    assert all(line.endswith("not measured at this size") for line in verdicts)


def test_paging_holds_more_tokens_than_preallocation_on_the_quick_workload():
    shares = serving.memory_rows(quick=True)
    assert shares["max"] < shares["oracle"] < shares["paged"] <= 1.0
