"""``triton_attention``: exact attention through the Triton kernels, with their backward pass.

The entry point checks its inputs (before Triton is imported, so a mistake reads the same on
every platform), makes them contiguous, launches the forward kernel
(:mod:`attnbook.kernels.forward`) and saves q, k, v, the output and the per-row log-sum-exp for
the backward kernels (:mod:`attnbook.kernels.backward`), through a ``torch.autograd.Function``.

Where CUDA is available the kernels are compiled for the GPU and the inputs must be CUDA
tensors (float16, bfloat16 or float32). Elsewhere they run in Triton's interpreter on CPU
tensors, float32 only (see :mod:`attnbook.kernels.runtime`): correct, and slow.
"""

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnbook.core._checks import check_bool, check_int, check_scale, shape_of
from attnbook.core.trace import record
from attnbook.kernels.runtime import import_triton

MAX_HEAD_DIM = 128
# The kernels compute element offsets such as bh * T * d in 32-bit integers.
MAX_ELEMENTS = 2**31 - 1
# The forward's BLOCK_M must be a multiple of BLOCK_N: its causal stage 1 stops at the query
# block's first row, which must then start a key block; its diagonal is BLOCK_M / BLOCK_N key
# blocks. The backward kernels use square tiles (BLOCK), so that a key block's diagonal is
# exactly one query block. The interpreter pays per block operation: bigger tiles are cheaper.
CPU_BLOCK = 64
CUDA_BLOCK_M, CUDA_BLOCK_N, CUDA_BLOCK = 128, 64, 64
NAMES = ("query", "key", "value")


def _expected_device_and_dtypes() -> tuple[str, tuple[torch.dtype, ...]]:
    if torch.cuda.is_available():
        return "cuda", (torch.float16, torch.bfloat16, torch.float32)
    return "cpu", (torch.float32,)


def check_triton_inputs(query: object, key: object, value: object) -> None:
    """Raise ``ValueError`` unless query (B, H, T, d), key and value (B, H, S, d) fit the
    kernels: same dtype and device, d <= 128, T and S at least 1, and each under 2**31
    elements (the kernels' offsets are 32-bit integers, which would wrap silently)."""
    device, dtypes = _expected_device_and_dtypes()
    layouts = ("(B, H, T, d)", "(B, H, S, d)", "(B, H, S, d)")
    for name, tensor, layout in zip(NAMES, (query, key, value), layouts, strict=True):
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{name}: expected a tensor of shape {layout}, got {type(tensor)}")
        if tensor.dim() != 4:
            raise ValueError(
                f"{name}: expected shape {layout} (4 dims), got {name}.shape = {shape_of(tensor)}"
            )
        if tensor.dtype not in dtypes:
            allowed = ", ".join(str(dtype) for dtype in dtypes)
            raise ValueError(
                f"{name}: expected dtype {allowed} on {device}, got {tensor.dtype}; the "
                f"interpreter runs float32 only (convert with {name}.float())"
            )
        if tensor.device.type != device:
            where = (
                "CUDA is available, so the kernels are compiled for the GPU"
                if device == "cuda"
                else "there is no CUDA device, so the kernels run in Triton's interpreter on CPU"
            )
            raise ValueError(
                f"{name}: expected a tensor on {device} ({where}), got one on {tensor.device}"
            )
    for name, tensor in (("key", key), ("value", value)):
        if tensor.dtype != query.dtype or tensor.device != query.device:
            raise ValueError(
                f"{name}: dtype {tensor.dtype} on {tensor.device} does not match query's "
                f"{query.dtype} on {query.device}"
            )
        if tensor.shape[:2] != query.shape[:2] or tensor.size(-1) != query.size(-1):
            raise ValueError(
                f"{name}: expected shape (B, H, S, d) = ({query.size(0)}, {query.size(1)}, S, "
                f"{query.size(-1)}) as query's B, H and d, got {name}.shape = {shape_of(tensor)}"
            )
    if value.size(2) != key.size(2):
        raise ValueError(
            f"value: expected S = {key.size(2)} rows as in key, got value.shape = {shape_of(value)}"
        )
    for name, tensor in zip(NAMES, (query, key, value), strict=True):
        if tensor.numel() > MAX_ELEMENTS:
            raise ValueError(
                f"{name}: expected fewer than 2**31 elements (the kernels' offsets are 32-bit "
                f"integers), got {tensor.numel()} in shape {shape_of(tensor)}"
            )
    check_int("query.shape[-1] (head width d)", query.size(-1), 1, MAX_HEAD_DIM)
    check_int("query.shape[2] (T)", query.size(2))
    check_int("key.shape[2] (S)", key.size(2))


def _dot_precision(dtype: torch.dtype) -> str:
    """float32 products in full precision ("ieee"), not the GPU's default TF32."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _block_d(head_dim: int) -> int:
    """The head width padded to a power of two, at least 16 (what ``tl.dot`` accepts)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def _check_block(name: str, block: int) -> None:
    """Tile sides are powers of two and at least 16: on an NVIDIA GPU ``tl.dot`` refuses to sum
    float16 products over fewer than 16 elements, which the interpreter runs without complaint."""
    if block < 16 or block & (block - 1):
        raise ValueError(f"{name}: expected a power of two, at least 16, got {block}")


def attention_forward(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float,
    block_m: int | None = None, block_n: int | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Launch the forward kernel on contiguous (B, H, T, d) inputs: ``(output, lse)``.

    output (B, H, T, d) in the inputs' dtype; lse (B, H, T) in float32. ``block_m`` must be a
    multiple of ``block_n``; both default to the machine's tile sizes.
    """
    on_cpu = query.device.type == "cpu"
    block_m = block_m or (CPU_BLOCK if on_cpu else CUDA_BLOCK_M)
    block_n = block_n or (CPU_BLOCK if on_cpu else CUDA_BLOCK_N)
    _check_block("block_m", block_m)
    _check_block("block_n", block_n)
    if block_m % block_n:
        raise ValueError(f"block_m: expected a multiple of block_n = {block_n}, got {block_m}")
    from attnbook.kernels.forward import attention_forward_kernel

    batch, n_heads, seq_q, head_dim = query.shape
    output = torch.empty_like(query)
    # (B, H, T)
    lse = torch.empty(batch, n_heads, seq_q, device=query.device, dtype=torch.float32)
    grid = (triton_cdiv(seq_q, block_m), batch * n_heads)
    attention_forward_kernel[grid](
        query, key, value, output, lse, seq_q, key.size(2), head_dim, scale,
        CAUSAL=is_causal, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(head_dim),
        PRECISION=_dot_precision(query.dtype),
    )  # fmt: skip
    return output, lse


def attention_backward(
    query: Tensor, key: Tensor, value: Tensor, output: Tensor, lse: Tensor,
    grad_output: Tensor, is_causal: bool, scale: float, block: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """Launch the backward kernels on contiguous tensors: ``(dq, dk, dv)``."""
    block = block or (CPU_BLOCK if query.device.type == "cpu" else CUDA_BLOCK)
    _check_block("block", block)
    from attnbook.kernels.backward import delta_kernel, dkdv_kernel, dq_kernel

    batch, n_heads, seq_q, head_dim = query.shape
    seq_k = key.size(2)
    block_d = _block_d(head_dim)
    precision = _dot_precision(query.dtype)
    # (B, H, T)
    delta = torch.empty_like(lse)
    delta_kernel[(triton_cdiv(seq_q, block), batch * n_heads)](
        output, grad_output, delta, seq_q, head_dim, BLOCK_M=block, BLOCK_D=block_d
    )
    grad_query = torch.empty_like(query)
    grad_key, grad_value = torch.empty_like(key), torch.empty_like(value)
    dkdv_kernel[(triton_cdiv(seq_k, block), batch * n_heads)](
        query, key, value, grad_output, lse, delta, grad_key, grad_value, seq_q, seq_k,
        head_dim, scale, CAUSAL=is_causal, BLOCK=block, BLOCK_D=block_d, PRECISION=precision,
    )  # fmt: skip
    dq_kernel[(triton_cdiv(seq_q, block), batch * n_heads)](
        query, key, value, grad_output, lse, delta, grad_query, seq_q, seq_k, head_dim, scale,
        CAUSAL=is_causal, BLOCK=block, BLOCK_D=block_d, PRECISION=precision,
    )  # fmt: skip
    return grad_query, grad_key, grad_value


def triton_cdiv(length: int, block: int) -> int:
    """How many blocks of ``block`` cover ``length``: the grid's size along one axis."""
    return -(-length // block)


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale):
        output, lse = attention_forward(query, key, value, is_causal, scale)
        record("q", query, "B H T d_head", "queries, one program per block of query rows")
        record("k, v", key, "B H S d_head", "read block by block, never as a whole")
        record("output", output, "B H T d_head", "normalised once, at the end of each row")
        record("lse", lse, "B H T", "log-sum-exp per row: with q, k, v and O, all backward needs")
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.is_causal, ctx.scale = is_causal, scale
        return output

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        query, key, value, output, lse = ctx.saved_tensors
        grads = attention_backward(
            query, key, value, output, lse, grad_output.contiguous(), ctx.is_causal, ctx.scale
        )
        return (*grads, None, None)


def triton_attention(
    query: Tensor, key: Tensor, value: Tensor, *, is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:  # fmt: skip
    """softmax(q k^T * scale) v computed by the FlashAttention-2 Triton kernels.

    query (B, H, T, d), key and value (B, H, S, d), with 1 <= d <= 128; returns (B, H, T, d).
    ``is_causal``: query i sees keys 0..i (top-left, as ``F.scaled_dot_product_attention``),
    so no row is ever empty. ``scale`` defaults to 1 / sqrt(d). Differentiable: the backward
    pass runs the Triton backward kernels from the saved output and log-sum-exp. With CUDA the
    kernels are compiled (float16, bfloat16, float32 on the GPU); without it they run in
    Triton's interpreter (float32 on CPU). Raises ``ValueError`` for bad inputs and
    :class:`attnbook.kernels.runtime.TritonUnavailableError` where Triton cannot be imported.
    """
    check_triton_inputs(query, key, value)
    check_bool("is_causal", is_causal)
    check_scale(scale)
    import_triton()
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else float(scale)
    query, key, value = (tensor.contiguous() for tensor in (query, key, value))
    return _TritonAttention.apply(query, key, value, is_causal, scale)
