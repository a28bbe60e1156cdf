"""The benchmark suite runs in quick mode and prints the tables it promises (timings unchecked)."""

import re

import pytest

from attnbook.bench import __main__ as bench_main
from attnbook.bench import attention, decoding, ring, training


@pytest.fixture(scope="module")
def quick_output():
    import io
    from contextlib import redirect_stdout

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        bench_main.main(["--quick", "--threads", "1"])
    return buffer.getvalue()


def test_kernel_results_have_every_implementation_and_length():
    results = attention.kernel_benchmark(quick=True)
    assert [r.length for r in results] == list(attention.QUICK["lengths"])
    for r in results:
        assert set(r.seconds) == set(r.peak_bytes) == {"explicit", "tiled", "sdpa"}
        assert all(seconds > 0 for seconds in r.seconds.values())
        assert r.peak_bytes["explicit"] > 0 and r.peak_bytes["tiled"] > 0
    length, ratio, met = attention.memory_verdict(results)
    assert length == attention.QUICK["lengths"][-1] and ratio > 0
    assert met is None  # the target is set at T = 4096: no verdict at the quick sizes


def test_module_results_cover_mha_and_gqa():
    results = attention.module_benchmark(quick=True)
    kinds = [(r.length, r.kind) for r in results]
    assert kinds == [(t, kind) for t in attention.QUICK["lengths"] for kind in ("MHA", "GQA")]
    for r in results:
        expected = {"bare", "attnbook", "torch"} if r.kind == "MHA" else {"bare", "attnbook"}
        assert set(r.seconds) == expected


def test_quick_run_prints_three_tables_with_verdicts(quick_output):
    assert "Attention kernels" in quick_output
    assert "Attention modules" in quick_output
    assert "Attention for training (forward + backward)" in quick_output
    assert "KV-cache decoding" in quick_output
    assert "Ring attention on CPU processes" in quick_output
    targets = [line for line in quick_output.splitlines() if line.startswith("target:")]
    assert len(targets) >= 2
    assert all(any(word in line for word in ("met", "not measured")) for line in targets)
    kernel_header = next(line for line in quick_output.splitlines() if "explicit ms" in line)
    assert kernel_header.split()[:4] == ["T", "explicit", "ms", "tiled"]
    assert quick_output.rstrip().splitlines()[-1].startswith("total:")


def test_targets_that_do_not_apply_at_the_quick_sizes_say_so(quick_output):
    lines = quick_output.splitlines()
    for title in ("Attention kernels", "Attention modules", "Attention for training"):
        header = next(i for i, line in enumerate(lines) if line.startswith(title))
        verdict = next(line for line in lines[header:] if line.startswith("target:"))
        assert verdict.endswith(": not measured at this size"), verdict
    assert "nan" not in quick_output.lower().replace("nanosecond", "")


def test_training_results_and_verdict():
    results = training.training_benchmark(quick=True)
    assert [r.length for r in results] == list(training.QUICK["lengths"])
    for r in results:
        assert set(r.seconds) == set(r.peak_bytes) == {"explicit", "tiled"}
        assert all(value > 0 for value in [*r.seconds.values(), *r.peak_bytes.values()])
    assert training.memory_verdict(results) == (None, None)
    at_target = training.TrainingResult(4096, {}, {"explicit": 800, "tiled": 100})
    assert training.memory_verdict([*results, at_target]) == (0.125, True)
    table = training.format_training(results, quick=True)
    assert table.splitlines()[1].split() == [
        "T",
        "explicit",
        "ms",
        "tiled",
        "ms",
        "explicit",
        "MiB",
        "tiled",
        "MiB",
        "tiled/expl",
        "mem",
    ]


def test_quick_run_decodes_64_and_256_tokens_with_mha_both_ways(quick_output):
    lines = quick_output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("KV-cache decoding"))
    assert "speedup" in lines[header + 1]
    for row, tokens in zip(lines[header + 2 : header + 4], ("64", "256"), strict=True):
        assert row.split()[:3] == ["MHA", "8", tokens]
        assert row.split()[-1] == "True"  # same tokens with and without the cache
    target = lines[header + 4]
    assert target.startswith("target: the cache's speed-up grows with length, at 256 tokens")
    assert re.search(r": (met|NOT met) \(MHA \d+\.\dx\)$", target), target


def decoded(variant, n_new, cached_s, recomputed_s):
    return decoding.DecodeResult(variant, 8, n_new, cached_s, recomputed_s, same_tokens=True)


def test_the_decoding_verdict_is_the_growth_of_the_speed_up_whatever_the_machine_speed():
    growing = [decoded("MHA", 64, 1.0, 2.0), decoded("MHA", 256, 4.0, 20.0)]  # 2x, then 5x
    flat = [decoded("MQA", 64, 1.0, 4.0), decoded("MQA", 256, 4.0, 18.0)]  # 4x, then 4.5x
    assert decoding.growth_verdict(growing) == ({"MHA": 2.5}, True)
    assert decoding.growth_verdict(growing + flat) == ({"MHA": 2.5, "MQA": 1.125}, False)
    assert decoding.format_results(growing).endswith(": met (MHA 2.5x)")
    assert decoding.format_results(growing + flat).endswith(": NOT met (MHA 2.5x, MQA 1.1x)")
    # a machine twice as fast at everything, or one whose 256-token speed-up is only 4x:
    # the same verdict, where "5x at 256 tokens" would flip
    for factor in (0.5, 3.0):
        scaled = [
            decoded(r.variant, r.n_new, r.cached_s * factor, r.recomputed_s * factor)
            for r in growing
        ]
        assert decoding.growth_verdict(scaled)[1] is True
    slower = [decoded("MHA", 64, 1.0, 1.6), decoded("MHA", 256, 4.0, 16.0)]  # 1.6x, then 4x
    assert decoding.growth_verdict(slower) == ({"MHA": 2.5}, True)
    assert decoding.growth_verdict(growing[:1]) == ({}, None)
    assert decoding.format_results(growing[:1]).endswith(": not measured")


def test_ring_results_cover_every_world_size_with_the_memory_verdict():
    explicit, results = ring.ring_benchmark(quick=True)
    assert [r.world_size for r in results] == list(ring.QUICK["world_sizes"])
    assert explicit.peak_bytes > 0 and all(r.peak_bytes > 0 and r.seconds > 0 for r in results)
    assert results[-1].peak_bytes < results[0].peak_bytes  # more ranks, less memory per rank
    assert explicit.training_peak_bytes > explicit.peak_bytes
    assert all(r.training_peak_bytes > r.peak_bytes for r in results)
    for training_run in (False, True):
        worst, met = ring.memory_verdict(explicit, results, training=training_run)
        assert met == (worst <= 1.0)
    table = ring.format_ring(explicit, results, quick=True)
    assert table.splitlines()[-2].startswith("target: peak memory per rank <= 1/P")
    assert table.splitlines()[-1].startswith("target: forward + backward peak memory per rank")
