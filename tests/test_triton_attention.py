"""triton_attention (the FlashAttention-2 Triton kernels) against SDPA in float64.

Without CUDA the kernels run in Triton's interpreter, which is slow: the shapes are small, and
each case checks the output and all three gradients from one forward and one backward call.
Where Triton has no wheel (macOS, Windows) the kernel tests skip; the input checks and the
error that names the platform are tested everywhere.
"""

import pytest
import torch
import torch.nn.functional as F

from attnbook.core.masks import causal_mask
from attnbook.kernels import runtime
from attnbook.kernels.attention import (
    MAX_HEAD_DIM,
    attention_backward,
    attention_forward,
    check_triton_inputs,
    triton_attention,
)

needs_triton = pytest.mark.skipif(
    not runtime.has_triton_wheel(),
    reason=f"triton has no wheel for {runtime.platform_name()} (Linux x86-64/aarch64 only)",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ATOL = 2e-5  # float32 kernels against a float64 reference, values and gradients of size ~1


def _inputs(batch, heads, seq_q, seq_k, head_dim, seed):
    generator = torch.Generator().manual_seed(seed)
    shapes = ((seq_q, head_dim), (seq_k, head_dim), (seq_k, head_dim))
    return [
        torch.randn(batch, heads, *shape, generator=generator).to(DEVICE).requires_grad_()
        for shape in shapes
    ]


def _check_against_sdpa(batch, heads, seq_q, seq_k, head_dim, is_causal, seed=0, scale=None):
    q, k, v = _inputs(batch, heads, seq_q, seq_k, head_dim, seed)
    output = triton_attention(q, k, v, is_causal=is_causal, scale=scale)
    grad_output = torch.randn_like(output)
    output.backward(grad_output)
    reference = [x.detach().double().requires_grad_() for x in (q, k, v)]
    expected = F.scaled_dot_product_attention(*reference, is_causal=is_causal, scale=scale)
    expected.backward(grad_output.double())
    assert output.shape == expected.shape and output.dtype == q.dtype
    torch.testing.assert_close(output.double(), expected, atol=ATOL, rtol=0)
    for name, mine, theirs in zip("qkv", (q, k, v), reference, strict=True):
        assert mine.grad.shape == mine.shape, name
        torch.testing.assert_close(mine.grad.double(), theirs.grad, atol=ATOL, rtol=0, msg=name)


@needs_triton
@pytest.mark.parametrize(
    ("batch", "heads", "seq_q", "seq_k", "head_dim", "is_causal"),
    [
        (2, 2, 40, 24, 16, False),  # B and H > 1, T > S, neither a multiple of the 64-row block
        (1, 1, 70, 70, 40, True),  # causal over two blocks, the last partial; d padded to 64
        (1, 1, 30, 100, 64, True),  # T < S, causal top-left: blocks past the diagonal skipped
        (1, 1, 100, 30, 128, True),  # T > S, the widest head: a query block past the keys
    ],
)
def test_output_and_gradients_match_sdpa(batch, heads, seq_q, seq_k, head_dim, is_causal):
    _check_against_sdpa(batch, heads, seq_q, seq_k, head_dim, is_causal)


@needs_triton
def test_the_gpu_tile_shape_with_two_diagonal_tiles_per_program():
    """The GPU's shapes scaled down for the interpreter: a forward with BLOCK_M = 2 * BLOCK_N
    (128 by 64 on a GPU, 32 by 16 here), so each causal program walks two masked diagonal
    tiles, and a backward with square tiles of 16 (64 on a GPU); T < S, neither a multiple."""
    seq_q, seq_k = 50, 60
    q, k, v = (x.detach() for x in _inputs(1, 1, seq_q, seq_k, 16, seed=4))
    grad_output = torch.randn_like(q)
    scale = 0.25
    output, lse = attention_forward(q, k, v, True, scale, block_m=32, block_n=16)
    grads = attention_backward(q, k, v, output, lse, grad_output, True, scale, block=16)
    reference = [x.double().requires_grad_() for x in (q, k, v)]
    expected = F.scaled_dot_product_attention(*reference, is_causal=True, scale=scale)
    expected.backward(grad_output.double())
    torch.testing.assert_close(output.double(), expected, atol=ATOL, rtol=0)
    scores = (reference[0] @ reference[1].transpose(-2, -1)).detach() * scale
    scores = scores.masked_fill(~causal_mask(seq_q, seq_k).to(DEVICE), float("-inf"))
    torch.testing.assert_close(lse.double(), scores.logsumexp(-1), atol=ATOL, rtol=0)
    for name, mine, theirs in zip("qkv", grads, reference, strict=True):
        torch.testing.assert_close(mine.double(), theirs.grad, atol=ATOL, rtol=0, msg=name)


@pytest.mark.skipif(DEVICE != "cuda", reason="half precision runs only on a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("seq_q", "seq_k", "head_dim", "is_causal"),
    [
        (300, 300, 64, True),  # the GPU's 128-row query blocks, the last one partial
        (129, 200, 40, False),  # d padded to 64 inside the kernel; T, S off every block
        (1, 257, 128, False),  # one query row (a decoding step) over keys past two blocks
        (1000, 1000, 128, True),  # the widest head, many diagonal tiles
    ],
)
def test_half_precision_on_the_gpu_is_as_accurate_as_sdpa(dtype, seq_q, seq_k, head_dim, is_causal):
    """Compiled kernels in float16 and bfloat16: against a float64 reference, the output and
    the gradients err at most twice as much as SDPA's own in the same dtype, plus the dtype's
    rounding of an O(1) value (the FlashAttention papers' test)."""
    generator = torch.Generator().manual_seed(5)
    shapes = ((2, 3, seq_q, head_dim), (2, 3, seq_k, head_dim), (2, 3, seq_k, head_dim))
    exact = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes]
    grad_output = torch.randn(2, 3, seq_q, head_dim, generator=generator, dtype=torch.float64)
    results = {}
    for name, attention in (("triton", triton_attention), ("sdpa", F.scaled_dot_product_attention)):
        inputs = [x.to(DEVICE, dtype).requires_grad_() for x in exact]
        output = attention(*inputs, is_causal=is_causal)
        output.backward(grad_output.to(DEVICE, dtype))
        results[name] = [t.double().cpu() for t in (output, *(x.grad for x in inputs))]
    reference = [x.clone().requires_grad_() for x in exact]
    expected = F.scaled_dot_product_attention(*reference, is_causal=is_causal)
    expected.backward(grad_output)
    rounding = torch.finfo(dtype).eps
    truths = (expected.detach(), *(x.grad for x in reference))
    for what, mine, theirs, truth in zip(
        "oqkv", results["triton"], results["sdpa"], truths, strict=True
    ):
        error, sdpa_error = ((x - truth).abs().max().item() for x in (mine, theirs))
        assert error <= 2 * sdpa_error + rounding, (what, error, sdpa_error)


def test_the_forward_refuses_a_query_block_that_is_not_a_multiple_of_the_key_block():
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    with pytest.raises(ValueError, match="block_m: expected a multiple of block_n = 64, got 32"):
        attention_forward(q, q, q, True, 0.25, block_m=32, block_n=64)


@pytest.mark.parametrize(
    "blocks, message",
    [
        ({"block_m": 8, "block_n": 8}, "block_m: expected a power of two, at least 16, got 8"),
        ({"block_m": 64, "block_n": 48}, "block_n: expected a power of two, at least 16, got 48"),
    ],
)
def test_the_forward_refuses_tiles_a_gpu_cannot_multiply(blocks, message):
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    with pytest.raises(ValueError, match=message):
        attention_forward(q, q, q, True, 0.25, **blocks)


def test_the_backward_refuses_a_tile_below_16():
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    lse = torch.zeros(1, 1, 4, device=DEVICE)
    with pytest.raises(ValueError, match="block: expected a power of two, at least 16, got 8"):
        attention_backward(q, q, q, q, lse, q, True, 0.25, block=8)


@needs_triton
def test_a_custom_scale_and_a_single_key():
    _check_against_sdpa(1, 1, 5, 1, 8, is_causal=False, seed=1, scale=0.3)


@needs_triton
def test_large_scores_stay_finite():
    """Scores of several hundred: the online softmax subtracts the running maximum, so nothing
    overflows; float32 scores that large carry absolute errors near 1e-5, hence the tolerance."""
    q, k, v = _inputs(1, 1, 20, 20, 16, seed=2)
    output = triton_attention(q * 30, k * 30, v, is_causal=True)
    output.sum().backward()
    expected = F.scaled_dot_product_attention(
        (q * 30).double(), (k * 30).double(), v.double(), is_causal=True
    )
    assert torch.isfinite(output).all() and torch.isfinite(q.grad).all()
    torch.testing.assert_close(output.double(), expected, atol=2e-4, rtol=0)


@needs_triton
def test_non_contiguous_inputs_are_accepted():
    q, k, v = (x.detach().transpose(1, 2) for x in _inputs(1, 20, 3, 3, 16, seed=3))
    # (B, H, T, d) views of (B, T, H, d) storage
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(triton_attention(q, k, v).double(), expected, atol=ATOL, rtol=0)


def _good():
    return [torch.zeros(1, 2, 4, 8, device=DEVICE) for _ in range(3)]


@pytest.mark.parametrize(
    ("position", "bad", "match"),
    [
        (0, torch.zeros(2, 4, 8), r"query: expected shape \(B, H, T, d\) \(4 dims\)"),
        (1, torch.zeros(1, 2, 4, 8, dtype=torch.int64), "key: expected dtype"),
        (2, torch.zeros(1, 2, 4, 8, dtype=torch.float64), "value: expected dtype"),
        (1, torch.zeros(1, 3, 4, 8), r"key: expected shape \(B, H, S, d\) = \(1, 2, S, 8\)"),
        (2, torch.zeros(1, 2, 5, 8), "value: expected S = 4"),
        (0, "q", "query: expected a tensor"),
    ],
)
def test_bad_inputs_name_the_argument(position, bad, match):
    tensors = _good()
    tensors[position] = bad.to(DEVICE) if isinstance(bad, torch.Tensor) else bad
    with pytest.raises(ValueError, match=match):
        triton_attention(*tensors)


def test_head_width_and_lengths_are_bounded():
    wide = torch.zeros(1, 1, 4, MAX_HEAD_DIM + 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"head width d\): expected an int in \[1, 128\]"):
        check_triton_inputs(wide, wide, wide)
    empty, keys = (torch.zeros(1, 1, n, 8, device=DEVICE) for n in (0, 4))
    with pytest.raises(ValueError, match=r"query.shape\[2\] \(T\): expected a positive int"):
        check_triton_inputs(empty, keys, keys)


def test_the_wrong_device_is_named():
    other = "cpu" if DEVICE == "cuda" else "meta"
    tensors = _good()
    tensors[1] = torch.zeros(1, 2, 4, 8, device=other)
    with pytest.raises(ValueError, match=f"key: expected a tensor on {DEVICE}"):
        triton_attention(*tensors)


def test_bad_switches_are_refused():
    with pytest.raises(ValueError, match="is_causal: expected True or False"):
        triton_attention(*_good(), is_causal=1)
    with pytest.raises(ValueError, match="scale: expected a finite number"):
        triton_attention(*_good(), scale=float("nan"))


def test_a_platform_without_triton_gets_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(runtime.sys, "platform", "darwin")
    monkeypatch.setattr(runtime.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(runtime.platform, "machine", lambda: "arm64")
    monkeypatch.setitem(runtime.sys.modules, "triton", None)  # `import triton` fails
    with pytest.raises(runtime.TritonUnavailableError, match="Darwin arm64.*Linux.*WSL"):
        runtime.import_triton()


def test_triton_imported_without_the_interpreter_on_a_cpu_gets_a_clear_error(monkeypatch):
    import triton  # noqa: F401  (already imported by the tests above; here for certain)

    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(runtime.INTERPRET_VARIABLE, "0")
    with pytest.raises(runtime.TritonUnavailableError, match="TRITON_INTERPRET=1"):
        runtime.import_triton()


@needs_triton
@pytest.mark.skipif(not runtime.interpreting(), reason="records calls in Triton's interpreter")
@pytest.mark.parametrize(("seq", "block_m", "block_n", "full", "diagonal"), [
    (256, 128, 64, 2, 4),  # the GPU's tiles: 2 programs, 2 full tiles, 2 diagonal tiles each
    (100, 32, 16, 12, 7),  # T = S no multiple of either block: the last program has 1 diagonal
])  # fmt: skip
def test_the_forward_visits_exactly_the_tiles_a_causal_classifier_keeps(
    monkeypatch, seq, block_m, block_n, full, diagonal
):
    """The tiles the causal forward kernel runs, recorded in the interpreter, where its tile
    helper is a Python call: every one is a tile that the corner rule of chapter 16's exercise
    1 calls full (stage 1, no causal mask) or diagonal (stage 2), each exactly once, and no
    tile that rule skips is read."""
    from exercise_answers import causal_tile_kind

    from attnbook.kernels import forward

    visited, tile = [], forward._forward_tile

    def recording(*args):
        # args 6, 7 and 12: start_n (an int), offs_m (the program's query rows), DIAGONAL
        start_m = int(args[7].handle.data[0])
        visited.append((start_m, args[6], "diagonal" if args[12] else "full"))
        return tile(*args)

    monkeypatch.setattr(forward, "_forward_tile", recording)
    q = torch.randn(1, 1, seq, 16)
    attention_forward(q, q, q, True, 0.25, block_m=block_m, block_n=block_n)
    grid = [(m, n) for m in range(0, seq, block_m) for n in range(0, seq, block_n)]
    kept = [(m, n, causal_tile_kind(m, n, block_m, block_n)) for m, n in grid]
    assert sorted(visited) == sorted(tile for tile in kept if tile[2] != "skip")
    assert [kind for *_, kind in visited].count("full") == full
    assert [kind for *_, kind in visited].count("diagonal") == diagonal


def test_the_chapters_tile_count_is_the_classifiers():
    """Chapter 16 counts T = S = 1024 with 128 by 64 tiles from the kernel's loop bounds (56
    full, 16 diagonal, 56 skipped); its exercise 1 solution says the classifier agrees."""
    from exercise_answers import causal_tile_kind

    kinds = [
        causal_tile_kind(m, n, 128, 64) for m in range(0, 1024, 128) for n in range(0, 1024, 64)
    ]
    assert [kinds.count(kind) for kind in ("full", "diagonal", "skip")] == [56, 16, 56]


def test_tensors_whose_offsets_would_overflow_32_bits_are_refused():
    # a stride-0 view: 2**31 elements, one float of memory
    huge = torch.zeros(1, device=DEVICE).view(1, 1, 1, 1).expand(2**15, 1, 2**16, 1)
    small = torch.zeros(2**15, 1, 4, 1, device=DEVICE)
    with pytest.raises(ValueError, match=r"query: expected fewer than 2\*\*31 elements"):
        check_triton_inputs(huge, small, small)
    with pytest.raises(ValueError, match=r"key: expected fewer than 2\*\*31 elements"):
        check_triton_inputs(small, huge, huge)
