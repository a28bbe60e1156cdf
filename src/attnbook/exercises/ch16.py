"""Chapter 16's exercise checkers: which tiles a causal FlashAttention kernel visits, a causal
kernel of the reader's own, the exp2 form of the online softmax, the backward's delta, and a
dQ kernel.

The kernels are the reader's; these checkers only call them on small tensors (on CUDA where it
is available, else on the CPU, where the reader's Triton runs in its interpreter) and compare
with PyTorch in float64. They never import Triton themselves.
"""

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)

# Chapter 16: the Triton FlashAttention kernel.

KINDS = ("full", "diagonal", "skip")


def _expected_kind(start_m: int, start_n: int, block_m: int, block_n: int) -> str:
    if start_n + block_n - 1 <= start_m:
        return "full"  # the tile's last key is at or before its first query
    if start_n > start_m + block_m - 1:
        return "skip"  # the tile's first key is after its last query
    return "diagonal"


@_checker
def check_causal_tile_kind(fn: Callable[[int, int, int, int], str]) -> None:
    """``fn(start_m, start_n, block_m, block_n)``: "full", "diagonal" or "skip" for the tile of
    queries start_m .. start_m + block_m - 1 and keys start_n .. start_n + block_n - 1 under a
    causal mask (query i sees keys 0..i)."""
    cases = [
        (0, 0, 4, 4), (4, 0, 4, 4), (0, 4, 4, 4), (8, 4, 4, 4), (4, 4, 4, 4),
        (8, 0, 8, 4), (8, 4, 8, 4), (8, 8, 8, 4), (8, 12, 8, 4), (8, 16, 8, 4),
        (4, 1, 4, 4), (4, 3, 4, 2), (3, 6, 4, 2), (3, 7, 4, 2), (0, 0, 1, 1), (2, 1, 1, 1),
    ]  # fmt: skip
    for start_m, start_n, block_m, block_n in cases:
        call = f"causal_tile_kind({start_m}, {start_n}, {block_m}, {block_n})"
        kind = _call(fn, call, start_m, start_n, block_m, block_n)
        if kind not in KINDS:
            _fail(f"{call} should return one of {KINDS}, got {kind!r}")
        expected = _expected_kind(start_m, start_n, block_m, block_n)
        if kind == expected:
            continue
        queries = f"queries {start_m}..{start_m + block_m - 1}"
        keys = f"keys {start_n}..{start_n + block_n - 1}"
        why = {
            "full": f"every one of {keys} is at or before the first of {queries}",
            "skip": f"every one of {keys} is after the last of {queries}",
            "diagonal": f"some of {keys} are visible to {queries} and some are not",
        }[expected]
        _fail(f"{call} returned {kind!r}, expected {expected!r}: {why}")
    _succeed("full below the diagonal, masked on it, skipped above it, for any block sizes")


def _random_qkv(
    seq_q: int, seq_k: int, head_dim: int, seed: int, n_heads: int = 1
) -> list[torch.Tensor]:
    """(1, H, T, d) queries and (1, H, S, d) keys and values, on the kernels' device."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = _generator(seed)
    lengths = (seq_q, seq_k, seq_k)
    return [torch.randn(1, n_heads, n, head_dim, generator=generator).to(device) for n in lengths]


def _call_kernel(fn: Callable, call: str, *args):
    """The reader's launch, with NumPy's warnings about inf - inf silenced: in the interpreter
    a fully masked row warns before it turns into NaN, which the checks below then name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _call(fn, call, *args)


def _check_output(out, q, k, v, call: str, is_causal: bool) -> None:
    out = _as_tensor(out, call, "the output, a tensor shaped like q")
    if out.shape != q.shape:
        _fail(f"{call} should return an output of shape {tuple(q.shape)}, got {tuple(out.shape)}")
    if not torch.isfinite(out).all():
        _fail(f"{call} returned inf or NaN: a row whose every key is masked divides 0 by 0")
    expected = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=is_causal
    )
    if not _close(out, expected, atol=1e-5, rtol=0):
        mask = "causal " if is_causal else ""
        error = (out.double() - expected).abs().max().item()
        _fail(f"{call}: the output differs from {mask}SDPA in float64 by up to {error:.2g}")


# (BM, BN, heads, tiles read, tiles of an unmasked kernel) for T = S = 50: query block i
# reads the key blocks that start before (i + 1) * BM, in every one of the heads
CAUSAL_FLASH_CASES = ((16, 16, 1, 10, 16), (32, 16, 2, 12, 16))


@_checker
def check_causal_flash(fn: Callable) -> None:
    """``fn(q, k, v, BM, BN)``: ``(out, tiles)``, causal attention (query i sees keys 0..i) and
    how many (query block, key block) tiles the kernel read in all, for T = S = 50: blocks of
    16 by 16 with one head, then of 32 queries by 16 keys with two heads."""
    for block_m, block_n, n_heads, expected, unmasked in CAUSAL_FLASH_CASES:
        q, k, v = _random_qkv(50, 50, 16, seed=16 + block_m + n_heads, n_heads=n_heads)
        call = f"causal_flash(q, k, v, {block_m}, {block_n}) with T = S = 50, {n_heads} head"
        call += "s" if n_heads > 1 else ""
        result = _call_kernel(fn, call, q, k, v, block_m, block_n)
        if not isinstance(result, tuple) or len(result) != 2:
            _fail(f"{call} should return a pair (out, tiles), got {type(result).__name__}")
        out, tiles = result
        _check_output(out, q, k, v, call, is_causal=True)
        tiles = int(tiles)
        if tiles == unmasked:
            _fail(
                f"{call} read all {unmasked} tiles: the output is right, but query block i "
                "never sees the key blocks after its last row; stop its loop at "
                "min(S, (i + 1) * BM)"
            )
        if n_heads > 1 and tiles == expected // n_heads:
            _fail(
                f"{call} read {tiles} tiles, the count of one head: every (query block, head) "
                f"program reads its tiles, {expected} in all"
            )
        if tiles != expected:
            _fail(
                f"{call} read {tiles} tiles, expected {expected}: one per key block that "
                "starts before (i + 1) * BM, in every program"
            )
    _succeed(
        "causal output within 1e-5 of SDPA; 10 tiles read of 16 with 16 x 16 blocks, "
        "12 of 16 with 32 x 16 blocks and two heads"
    )


@_checker
def check_flash_exp2(fn: Callable) -> None:
    """``fn(q, k, v)``: ``(out, lse)``, attention and the natural log-sum-exp of each row, from a
    kernel that works in base 2, for T = 40 queries, S = 70 keys and d = 16."""
    q, k, v = _random_qkv(40, 70, 16, seed=17)
    call = "flash_exp2(q, k, v) with T = 40, S = 70, d = 16"
    result = _call_kernel(fn, call, q, k, v)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail(f"{call} should return a pair (out, lse), got {type(result).__name__}")
    out, lse = result
    _check_output(out, q, k, v, call, is_causal=False)
    lse = _as_tensor(lse, call, "the log-sum-exp, a tensor of shape (B, H, T)")
    if lse.shape != q.shape[:-1]:
        _fail(f"{call} should return lse of shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}")
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.size(-1))
    expected = scores.logsumexp(dim=-1)  # (B, H, T)
    if _close(lse * math.log(2), expected, atol=1e-5, rtol=0):
        _fail(f"{call}: lse is still the base-2 value; multiply it by ln 2 to get the natural one")
    if not _close(lse, expected, atol=1e-5, rtol=0):
        error = (lse.double() - expected).abs().max().item()
        _fail(f"{call}: lse differs from torch.logsumexp of the scores by up to {error:.2g}")
    _succeed("output within 1e-5 of SDPA, and lse2 * ln 2 is the natural log-sum-exp")


def _backward_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    """(q, k, v, grad_out): 2 heads, T = 50 queries, S = 70 keys, d = 16, on the kernels' device."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = _generator(seed)
    shapes = ((1, 2, 50, 16), (1, 2, 70, 16), (1, 2, 70, 16), (1, 2, 50, 16))
    return tuple(torch.randn(s, generator=generator).to(device) for s in shapes)


def _weights_and_their_gradient(q, k, v, grad_out) -> tuple[torch.Tensor, torch.Tensor]:
    """A = softmax(Q K^T * scale) and dA = dO V^T, both (B, H, T, S), in float64."""
    scale = q.size(-1) ** -0.5
    weights = F.softmax(q.double() @ k.double().transpose(-2, -1) * scale, dim=-1)
    return weights, grad_out.double() @ v.double().transpose(-2, -1)


def _fail_on_layout(call: str, wrong: torch.Tensor, offsets: str) -> None:
    """Name a head offset or a missed last block from the pattern of ``wrong`` rows (B, H, T)."""
    if not wrong[:, 0].any():
        _fail(f"{call}: head 0 is right but head 1 is not: batch-head bh's rows start at {offsets}")
    if not wrong[..., :32].any():
        rows = wrong.nonzero()[:, -1]
        _fail(
            f"{call}: rows {int(rows.min())}..{int(rows.max())} are wrong, the first 32 right: "
            "launch cdiv(T, BLOCK) programs and mask the last block's rows past T"
        )


def _delta_inputs() -> tuple[torch.Tensor, ...]:
    """(q, k, v, out, grad_out): :func:`_backward_inputs` and out from SDPA."""
    q, k, v, grad_out = _backward_inputs(18)
    # (B, H, T, d); contiguous, as the kernel's pointer arithmetic assumes: on a GPU, SDPA's
    # flash and memory-efficient backends return a (B, T, H, d) layout seen through strides
    out = F.scaled_dot_product_attention(q, k, v).contiguous()
    return q, k, v, out, grad_out


@_checker
def check_delta_rows(fn: Callable) -> None:
    """``fn(out, grad_out)``: delta (B, H, T), each query row's dot product of dO and O, from the
    reader's Triton kernel, for 2 heads, T = 50 and d = 16; compared in float64 with the sum
    the softmax's backward needs, rowsum(A * dA) with dA = dO V^T."""
    q, k, v, out, grad_out = _delta_inputs()
    call = "delta_rows(out, grad_out) with 2 heads, T = 50, d = 16"
    delta = _as_tensor(_call_kernel(fn, call, out, grad_out), call, "delta, a (B, H, T) tensor")
    if delta.shape != out.shape[:-1]:
        _fail(
            f"{call} should return delta of shape {tuple(out.shape[:-1])}, got {tuple(delta.shape)}"
        )
    weights, d_weights = _weights_and_their_gradient(q, k, v, grad_out)  # (B, H, T, S) each
    expected = (weights * d_weights).sum(dim=-1)  # (B, H, T)
    wrong = ~torch.isclose(delta.double(), expected, atol=1e-5, rtol=0)  # (B, H, T)
    if not wrong.any():
        _succeed("delta = rowsum(dO * O) within 1e-5 of rowsum(A * dA), in every head and row")
        return
    _fail_on_layout(call, wrong, "bh * T * d, both in O and dO and in delta (at bh * T)")
    error = (delta.double() - expected).abs().max().item()
    _fail(f"{call}: delta differs from rowsum(A * dA) by up to {error:.2g}; sum dO * O along d")


@_checker
def check_dq_kernel(fn: Callable) -> None:
    """``fn(q, k, v, grad_out)``: dQ of non-causal attention from the reader's Triton kernel, for
    2 heads, T = 50 queries, S = 70 keys and d = 16; compared in float64 with the gradient of
    SDPA's autograd, within 2e-5 (the kernel works in float32). Raises ValueError when ``fn``
    is not a function."""
    if not callable(fn):
        raise ValueError(f"fn: expected a function small_dq(q, k, v, grad_out), got {fn!r}")
    q, k, v, grad_out = _backward_inputs(19)
    call = "small_dq(q, k, v, grad_out) with 2 heads, T = 50, S = 70, d = 16"
    dq = _as_tensor(_call_kernel(fn, call, q, k, v, grad_out), call, "dq, a tensor like q")
    if dq.shape != q.shape:
        _fail(f"{call} should return dq of shape {tuple(q.shape)}, got {tuple(dq.shape)}")
    if not torch.isfinite(dq).all():
        _fail(f"{call} returned inf or NaN: mask the exponent, exp(-inf) = 0, not the weight")
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves).backward(grad_out.double())
    expected = leaves[0].grad  # (B, H, T, d)
    scale = q.size(-1) ** -0.5
    wrong = ~torch.isclose(dq.double(), expected, atol=2e-5, rtol=0).all(dim=-1)  # (B, H, T)
    if not wrong.any():
        _succeed("dq within 2e-5 of SDPA's autograd in float64, in every head and row")
        return
    if _close(dq * scale, expected, atol=2e-5, rtol=0):
        _fail(
            f"{call}: dq is {1 / scale:g} times SDPA's, 1 / scale: dQ = dZ K * scale; multiply "
            "by the scale once, when dq is stored"
        )
    weights, d_weights = _weights_and_their_gradient(q, k, v, grad_out)  # (B, H, T, S) each
    no_delta = (weights * d_weights) @ k.double() * scale  # (B, H, T, d)
    if _close(dq, no_delta, atol=2e-5, rtol=0):
        _fail(
            f"{call}: dq is (A * dA) K * scale; subtract each row's delta = rowsum(dO * O) "
            "first: dZ = A * (dA - delta)"
        )
    offsets = "bh * T * d in Q, dO and dQ, at bh * S * d in K and V, at bh * T in lse and delta"
    _fail_on_layout(call, wrong, offsets)
    error = (dq.double() - expected).abs().max().item()
    _fail(f"{call}: dq differs from SDPA's autograd in float64 by up to {error:.2g}")
