"""The top-k attention benchmark runs in quick mode and prints its rows (timings unchecked)."""

import torch

from attnbook.bench import sparse


def test_quick_run_reports_every_method_and_the_break_even():
    results = sparse.run_benchmark(quick=True)
    assert results["top_k"] == sparse.QUICK["length"] // 16
    assert set(results["seconds"]) == set(results["peak_bytes"]) == {"explicit", "sdpa", "topk"}
    assert all(seconds > 0 for seconds in results["seconds"].values())
    text = sparse.format_results(results, quick=True)
    assert "explicit" in text and "sdpa" in text and "topk" in text
    assert "k * (d_head + 1) = 272 < T = 256" in text


def test_random_indices_are_causal_distinct_and_padded():
    indices = sparse.causal_random_indices(1, 2, 8, 3)
    assert indices.shape == (1, 2, 8, 3)
    assert (indices <= torch.arange(8)[:, None]).all()
    assert torch.equal((indices >= 0).sum(-1)[0, 0], torch.tensor([1, 2, 3, 3, 3, 3, 3, 3]))
