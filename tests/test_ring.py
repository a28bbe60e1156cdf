"""Ring and all-gather attention on P = 1, 2, 3 CPU processes equal PyTorch's SDPA on the full
sequence; the launcher surfaces a failing rank's traceback and leaves no process behind.

Starting processes is slow, so each P is one launch that runs every case (module-level workers,
so that the spawned processes can import them).
"""

import multiprocessing
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from helpers import TOLERANCES, as_float64, raises, seeded_tensors

from attnbook.efficient.launcher import WorkerError, launch, rank_device
from attnbook.efficient.ring import all_gather_attention, ring_attention, run_cases
from attnbook.efficient.sharding import (
    chunk_ranges,
    shard_positions,
    shard_sequence,
    step_work,
    unshard_sequence,
)
from attnbook.efficient.tiled import attention_block, merge_partials

# (method, is_causal, layout, dtype, T, S): T and S divisible by 2P for every P tested (1, 2, 3)
CASES = [
    (method, causal, layout, dtype, 12, 12)
    for method in ("ring", "all_gather")
    for causal in (False, True)
    for layout in ("contiguous", "zigzag")
    for dtype in (torch.float32, torch.float64)
] + [
    ("ring", False, "contiguous", torch.float32, 6, 18),
    ("ring", True, "zigzag", torch.float64, 12, 24),
    ("ring", True, "contiguous", torch.float32, 18, 6),
    ("all_gather", True, "zigzag", torch.float32, 24, 12),
]


# (is_causal, layout, dtype, T, S) of the backward cases: each rank's gradients are checked
GRAD_CASES = [
    (False, "contiguous", torch.float64, 12, 12),
    (True, "zigzag", torch.float64, 12, 12),
    (True, "contiguous", torch.float64, 6, 18),
    (False, "zigzag", torch.float64, 24, 12),
    (True, "zigzag", torch.float32, 12, 24),
]


def grad_case_inputs(case, seed):
    """Full query, key, value and the output's gradient (B, H, T, d_v) for a backward case."""
    *_, dtype, T, S = case
    shapes = ((2, 3, T, 8), (1, 3, S, 8), (2, 3, S, 5), (2, 3, T, 5))
    return seeded_tensors(*shapes, seed=seed, dtype=dtype)


def case_inputs(case, seed):
    """Full query (B, H, T, d), key (B, H, S, d), value (B, H, S, d_v) for one case."""
    *_, dtype, T, S = case
    shapes = ((2, 3, T, 8), (2, 3, S, 8), (2, 3, S, 5))
    return seeded_tensors(*shapes, seed=seed, dtype=dtype)


def parity_worker(inputs, grad_inputs):
    """Every case on this rank's shards: this rank's output shard per case, and its gradient
    shards (dq, dk, dv) per backward case."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # nccl (one rank per GPU) communicates CUDA tensors only; results go back on the CPU
    device = rank_device()
    gradients = []
    for (is_causal, layout, *_), tensors in zip(GRAD_CASES, grad_inputs, strict=True):
        names = ("query", "key", "value", "grad")
        shards = [
            shard_sequence(t, rank, world_size, layout, name).to(device)
            for t, name in zip(tensors, names, strict=True)
        ]  # (B, H, T/P, d), (1, H, S/P, d), (B, H, S/P, d_v), (B, H, T/P, d_v)
        leaves = [t.requires_grad_() for t in shards[:3]]
        output = ring_attention(*leaves, is_causal=is_causal, layout=layout)
        output.backward(shards[3])
        gradients.append([t.grad.cpu() for t in leaves])
    outputs = []
    for (method, is_causal, layout, *_), (query, key, value) in zip(CASES, inputs, strict=True):
        shards = [
            shard_sequence(t, rank, world_size, layout, name).to(device)
            for t, name in ((query, "query"), (key, "key"), (value, "value"))
        ]  # (B, H, T/P, d), (B, H, S/P, d), (B, H, S/P, d_v)
        attention = ring_attention if method == "ring" else all_gather_attention
        lengths = (query.size(-2), key.size(-2))
        output = attention(*shards, is_causal=is_causal, layout=layout, lengths=lengths)
        outputs.append(output.cpu())
    return outputs, gradients


def bad_input_worker():
    """Rank-dependent bad shards; returns the ValueError message each call raised."""
    rank = dist.get_rank()
    alone = dist.new_group([0])
    query = torch.randn(1, 2, 4, 8)  # (B, H, T/P, d)
    dtype = (torch.float32, torch.float64)[rank]
    messages = {}
    calls = {
        "mismatch": lambda: ring_attention(query[..., : 4 - rank, :], query, query),
        "mismatch_gather": lambda: all_gather_attention(query, *[query[..., : 3 + rank, :]] * 2),
        "zigzag_odd": lambda: ring_attention(query[..., :3, :], query, query, layout="zigzag"),
        "lengths": lambda: ring_attention(query, query, query, lengths=(16, 16)),
        "layout": lambda: ring_attention(query, query, query, layout="striped"),
        "scale_nan": lambda: ring_attention(query, query, query, scale=float("nan")),
        "dtype": lambda: ring_attention(*[query.to(dtype)] * 3),
        "dtype_gather": lambda: all_gather_attention(*[query.to(dtype)] * 3),
        "one_rank_bad": lambda: ring_attention(query, query, query, scale=[1.0, "x"][rank]),
        "scales_differ": lambda: ring_attention(query, query, query, scale=1.0 + rank),
    }
    if rank == 1:
        calls["not_member"] = lambda: ring_attention(query, query, query, group=alone)
    else:
        calls["group_size"] = lambda: ring_attention(
            query, query, query, group=alone, lengths=(8, 8)
        )
    for name, call in calls.items():
        try:
            call()
        except ValueError as error:
            messages[name] = str(error)
    return messages


def fail_on_rank_one():
    """Rank 1 raises; rank 0 waits for a message from rank 1 that never comes."""
    if dist.get_rank() == 1:
        raise RuntimeError("rank one fails on purpose")
    dist.recv(torch.empty(1), src=1)


def die_on_rank_one(how):
    """Rank 1 dies without a word (an exit code or a signal); rank 0 waits for it."""
    if dist.get_rank() == 1:
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.recv(torch.empty(1), src=1)


def sleep_forever():
    time.sleep(600)


def reference(query, key, value, is_causal):
    """PyTorch's SDPA on the full sequence, in float64."""
    return F.scaled_dot_product_attention(
        as_float64(query), as_float64(key), as_float64(value), is_causal=is_causal
    )


def check_gradients(world_size, grad_inputs, per_rank):
    """Each rank's dq, dk, dv equal its slices of float64 autograd through SDPA."""
    for number, (case, tensors) in enumerate(zip(GRAD_CASES, grad_inputs, strict=True)):
        is_causal, layout, dtype, *_ = case
        leaves = [as_float64(t).requires_grad_() for t in tensors[:3]]
        output = F.scaled_dot_product_attention(*leaves, is_causal=is_causal)
        expected = torch.autograd.grad(output, leaves, as_float64(tensors[3]))
        for rank in range(world_size):
            for name, ours, full in zip("qkv", per_rank[rank][number], expected, strict=True):
                theirs = shard_sequence(full, rank, world_size, layout).to(dtype)
                assert ours.shape == theirs.shape, (case, name)
                torch.testing.assert_close(
                    ours,
                    theirs,
                    **TOLERANCES.get(dtype, {}),
                    msg=lambda m, c=case, n=name, r=rank: f"{c} rank {r} d{n}: {m}",
                )


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_variant_equals_sdpa_on_the_full_sequence(world_size):
    inputs = [case_inputs(case, seed) for seed, case in enumerate(CASES)]
    grad_inputs = [grad_case_inputs(case, seed) for seed, case in enumerate(GRAD_CASES)]
    results = launch(parity_worker, world_size, inputs, grad_inputs)
    assert len(results) == world_size
    check_gradients(world_size, grad_inputs, [gradients for _, gradients in results])
    per_rank = [outputs for outputs, _ in results]
    for number, (case, (query, key, value)) in enumerate(zip(CASES, inputs, strict=True)):
        method, is_causal, layout, dtype, T, S = case
        shards = [outputs[number] for outputs in per_rank]
        assert all(s.shape == (2, 3, T // world_size, 5) and s.dtype == dtype for s in shards)
        output = unshard_sequence(shards, layout)  # (B, H, T, d_v)
        expected = reference(query, key, value, is_causal).to(dtype)
        tolerance = TOLERANCES.get(dtype, {})
        torch.testing.assert_close(output, expected, **tolerance, msg=lambda m, c=case: f"{c}: {m}")


def test_run_cases_reports_steps_memory_and_balanced_zigzag_work():
    query, key, value = seeded_tensors((1, 2, 24, 8), (1, 2, 24, 8), (1, 2, 24, 8))
    cases = [
        ("ring", True, "contiguous", True),
        ("ring", True, "zigzag", True),
        ("all_gather", True, "zigzag"),
    ]
    (grad_output,) = seeded_tensors((1, 2, 24, 8), seed=5)
    per_rank = launch(run_cases, 3, query, key, value, cases, grad_output)
    leaves = [as_float64(t).requires_grad_() for t in (query, key, value)]
    expected_grads = torch.autograd.grad(
        F.scaled_dot_product_attention(*leaves, is_causal=True), leaves, as_float64(grad_output)
    )
    for number, (_, _, layout, _) in enumerate(cases[:2]):
        for rank, results in enumerate(per_rank):
            assert results[number].training_peak_bytes > results[number].peak_bytes
            for ours, full in zip(results[number].grads, expected_grads, strict=True):
                expected = shard_sequence(full, rank, 3, layout).float()
                torch.testing.assert_close(ours, expected, **TOLERANCES[torch.float32])
    assert all(r[2].grads is None and r[2].training_peak_bytes is None for r in per_rank)
    expected = reference(query, key, value, True).float()
    for number, (_, _, layout, *_) in enumerate(cases):
        output = unshard_sequence([results[number].output for results in per_rank], layout)
        torch.testing.assert_close(output, expected, **TOLERANCES[torch.float32])
    work = [[sum(s.score_entries for s in r[c].steps) for r in per_rank] for c in (0, 1)]
    assert work[0] == [64, 128, 192]  # contiguous causal: rank r computes r + 1 blocks of 8 x 8
    assert work[1] == [112, 112, 112]  # zigzag: 2P + 1 = 7 tiles of 4 x 4 on every rank
    for number, layout in enumerate(("contiguous", "zigzag")):
        recorded = [[s.score_entries for s in r[number].steps] for r in per_rank]
        assert recorded == [[w * 8 * 8 for w in row] for row in step_work(3, layout)]
    steps = per_rank[1][0].steps
    assert [s.source for s in steps] == [1, 0, 2]
    assert [s.pairs for s in steps] == [((1, 1),), ((1, 0),), ()]  # rank 1 skips rank 2's keys
    shard_bytes = 2 * (1 * 2 * 8 * 8) * 4  # key and value shards, float32
    assert [s.bytes_sent for s in steps] == [shard_bytes, shard_bytes, 0]
    assert all(r[c].peak_bytes > 0 for r in per_rank for c in range(3))


def test_bad_shards_raise_value_errors_naming_the_argument_on_every_rank():
    messages = launch(bad_input_worker, 2)
    for rank_messages in messages:
        assert "every rank must hold shards of the same shapes" in rank_messages["mismatch"]
        assert rank_messages["mismatch"].startswith("query:")
        assert rank_messages["mismatch_gather"].startswith("query:")
        assert rank_messages["zigzag_odd"].startswith("query: a zigzag shard holds two")
        assert rank_messages["lengths"].startswith("group: its 2 ranks hold shards")
        assert rank_messages["layout"].startswith("layout: expected one of")
        assert rank_messages["scale_nan"].startswith("scale: expected a finite number")
        for name in ("dtype", "dtype_gather"):
            assert rank_messages[name].startswith(
                "query: every rank must hold shards of the same dtype (query, key, value); rank 0 "
                "has ['torch.float32', 'torch.float32', 'torch.float32'], rank 1 has "
                "['torch.float64'"
            )
        assert rank_messages["scales_differ"].startswith("scale: every rank must pass the same")
    assert messages[1]["one_rank_bad"] == "scale: expected a finite number or None, got 'x'"
    assert messages[0]["one_rank_bad"] == f"{messages[1]['one_rank_bad']} (on rank 1 of the group)"
    assert messages[1]["not_member"].startswith("group: this process is not a member")
    assert messages[0]["group_size"].startswith("group: its 1 ranks hold shards")


def test_a_failing_rank_raises_its_traceback_and_no_process_is_left():
    with pytest.raises(WorkerError, match="rank 1 of 2 raised") as caught:
        launch(fail_on_rank_one, 2)
    assert "Traceback" in str(caught.value)
    assert "RuntimeError: rank one fails on purpose" in str(caught.value)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    ("how", "words"),
    [("exit", "exited with code 3"), ("kill", "was killed by SIGKILL (exit code -9)")],
)
def test_a_rank_that_dies_is_reported_first_with_its_exit_code_or_signal(how, words):
    with pytest.raises(WorkerError) as caught:
        launch(die_on_rank_one, 2, how)
    message = str(caught.value)
    assert message.startswith(f"rank 1 of 2 {words} and sent no result")
    if "rank 0" in message:  # rank 0's lost connection, if it arrived in time: a consequence
        assert message.index("as consequences of rank 1's failure") < message.index("rank 0")
    assert multiprocessing.active_children() == []


def test_the_deadline_ends_every_process():
    with pytest.raises(TimeoutError, match="did not finish before the deadline"):
        launch(sleep_forever, 2, deadline_s=0.5)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_merged_partial_results_equal_sdpa_over_all_keys(dtype):
    query, key, value = seeded_tensors((2, 3, 7, 8), (2, 3, 11, 8), (2, 3, 11, 5), dtype=dtype)
    scale = 8**-0.5
    parts = [
        attention_block(query, key[..., s, :], value[..., s, :], scale=scale)
        for s in (slice(0, 4), slice(4, 11))
    ]
    output, lse = merge_partials(*parts[0], *parts[1])  # (B, H, T, d_v), (B, H, T, 1)
    expected = reference(query, key, value, False).to(dtype)
    torch.testing.assert_close(output, expected, **TOLERANCES.get(dtype, {}))
    scores = as_float64(query) @ as_float64(key).transpose(-2, -1) * scale  # (B, H, T, S)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1, keepdim=True))


def test_rows_with_no_keys_on_either_side_stay_zero_with_finite_gradients():
    query = torch.randn(1, 2, 4, requires_grad=True)  # (B, T, d)
    key, value = torch.randn(1, 3, 4), torch.randn(1, 3, 5)  # (B, S, d), (B, S, d_v)
    nothing = torch.zeros(2, 3, dtype=torch.bool)  # (T, S): no query may see any key
    part = attention_block(query, key, value, nothing, scale=0.5)
    output, lse = merge_partials(*part, *part)
    assert torch.equal(output, torch.zeros(1, 2, 5)) and torch.isinf(lse).all()
    output.sum().backward()
    assert torch.isfinite(query.grad).all()


def test_sharding_helpers_invert_each_other():
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)  # (B, L, d)
    for layout in ("contiguous", "zigzag"):
        for world_size in (1, 2, 3, 4):
            shards = [shard_sequence(x, r, world_size, layout) for r in range(world_size)]
            assert torch.equal(unshard_sequence(shards, layout), x)
            positions = [shard_positions(24, r, world_size, layout) for r in range(world_size)]
            assert all(
                torch.equal(s[0, :, 0] // 3, p) for s, p in zip(shards, positions, strict=True)
            )
    assert chunk_ranges(12, 3, "zigzag")[0] == [(0, 2), (10, 12)]
    assert chunk_ranges(12, 3, "zigzag")[2] == [(4, 6), (6, 8)]


def test_bad_inputs_outside_processes():
    x = torch.randn(1, 10, 4)
    with raises("query.shape[-2]: the zigzag layout over 3 ranks cuts the sequence into 6"):
        shard_sequence(x, 0, 3, "zigzag", name="query")
    with raises("x.shape[-2]: the contiguous layout over 3 ranks"):
        shard_sequence(x, 0, 3)
    with raises("rank: expected an int in [0, 1]"):
        shard_sequence(x, 2, 2)
    with raises("world_size: expected a positive int, got 0"):
        shard_sequence(x, 0, 0)
    with raises("world_size: expected a positive int, got 0"):
        shard_positions(10, 0, 0)
    with raises("shards: expected P >= 1 shards of one shape"):
        unshard_sequence([x, x[:, :4]])
    with raises("group: torch.distributed is not initialised"):
        ring_attention(x, x, x)
    with raises("fn: expected a function defined at the top level"):
        launch(lambda: 0, 2)

    def local_function():
        return 0

    with raises("fn: expected a function defined at the top level"):
        launch(local_function, 2)
    with raises("world_size: expected a positive int"):
        launch(sleep_forever, 0)
    with raises("backend: expected 'gloo' or 'nccl'"):
        launch(sleep_forever, 1, backend="mpi")
    assert multiprocessing.active_children() == []
