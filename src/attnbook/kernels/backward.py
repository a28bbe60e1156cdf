"""The FlashAttention backward pass as three Triton kernels, after Dao (2023), Algorithm 2.

With the weights A = softmax(Z) of the scaled scores Z recomputed tile by tile from the saved
``lse`` (A = exp(Z - lse)), the gradients are dV = A^T dO, dA = dO V^T, dZ = A * (dA - delta)
and dQ = dZ K * scale, dK = dZ^T Q * scale, where ``delta`` is the row dot product
rowsum(dO * O) (it equals rowsum(A * dA)). In the code p, dp and ds stand for A, dA and dZ.

FlashAttention-2 itself runs one main kernel with a program per key block and adds each tile's
share of dQ into main memory with atomic additions. This module chooses three kernels instead,
so that no two programs ever write the same rows: no atomics and a deterministic result, at the
price of recomputing Z and dA in the dq kernel (7 products per tile instead of 5):

- ``delta_kernel``: delta for one block of query rows;
- ``dkdv_kernel``: one program per block of keys, walking over the query blocks that see it,
  accumulating dK and dV in registers;
- ``dq_kernel``: one program per block of queries, walking over the key blocks it sees, as the
  forward pass does.

With ``CAUSAL`` each walk splits into the diagonal blocks (masked) and the rest (unmasked), as
in :mod:`attnbook.kernels.forward`; both kernels use square tiles (``BLOCK``) so that a key
block's diagonal is exactly one query block.
"""

from attnbook.kernels.runtime import import_triton

triton, tl = import_triton()


@triton.jit
def delta_kernel(Out, DO, DELTA, seq_q, head_dim, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Program (i, bh): delta = rowsum(dO * O) for query rows i * BLOCK_M ... of bh."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    rows = bh * seq_q * head_dim + offs_m[:, None] * head_dim + offs_d[None, :]
    mask = (offs_m[:, None] < seq_q) & (offs_d[None, :] < head_dim)
    o = tl.load(Out + rows, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + rows, mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * seq_q + offs_m, tl.sum(o * do, axis=1), mask=offs_m < seq_q)


@triton.jit
def _probabilities(q, k, lse, offs_m, offs_n, seq_q, seq_k, scale, DIAGONAL: tl.constexpr,
                   PRECISION: tl.constexpr):  # fmt: skip
    """The (BLOCK, BLOCK) tile P = exp(q k^T * scale - lse), zero where a key is not seen."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    visible = (offs_m[:, None] < seq_q) & (offs_n[None, :] < seq_k)
    if DIAGONAL:
        visible = visible & (offs_n[None, :] <= offs_m[:, None])
    # exp(-inf) = 0 where not seen; masking the exponent, not the result, avoids overflow
    return tl.exp(tl.where(visible, s - lse[:, None], float("-inf")))


@triton.jit
def _dkdv_tile(
    dk, dv, k, v, Q, DO, LSE, DELTA, start_m, offs_n, offs_d, seq_q, seq_k, head_dim, scale,
    DIAGONAL: tl.constexpr, BLOCK: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Add one block of queries' share to this key block's (dk, dv)."""
    offs_m = start_m + tl.arange(0, BLOCK)
    q_mask = (offs_m[:, None] < seq_q) & (offs_d[None, :] < head_dim)
    q = tl.load(Q + offs_m[:, None] * head_dim + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + offs_m[:, None] * head_dim + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE + offs_m, mask=offs_m < seq_q, other=0.0)
    delta = tl.load(DELTA + offs_m, mask=offs_m < seq_q, other=0.0)
    p = _probabilities(q, k, lse, offs_m, offs_n, seq_q, seq_k, scale, DIAGONAL, PRECISION)
    dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PRECISION)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION)
    return dk, dv


@triton.jit
def dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, seq_q, seq_k, head_dim, scale,
    CAUSAL: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Program (j, bh): dK and dV of key rows j * BLOCK ... of batch-head bh."""
    start_n = tl.program_id(0) * BLOCK
    bh = tl.program_id(1)
    offs_n = start_n + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    kv_rows = bh * seq_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :]
    kv_mask = (offs_n[:, None] < seq_k) & (offs_d[None, :] < head_dim)
    k = tl.load(K + kv_rows, mask=kv_mask, other=0.0)
    v = tl.load(V + kv_rows, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK, BLOCK_D], dtype=tl.float32)
    q_base = Q + bh * seq_q * head_dim
    do_base = DO + bh * seq_q * head_dim
    lse_base = LSE + bh * seq_q
    delta_base = DELTA + bh * seq_q
    # CAUSAL: queries before this key block see none of it; the diagonal block sees part of it
    start_full = 0
    if CAUSAL:
        start_full = start_n + BLOCK
        if start_n < seq_q:
            dk, dv = _dkdv_tile(
                dk, dv, k, v, q_base, do_base, lse_base, delta_base, start_n, offs_n, offs_d,
                seq_q, seq_k, head_dim, scale, True, BLOCK, PRECISION,
            )  # fmt: skip
    for start_m in range(start_full, seq_q, BLOCK):
        dk, dv = _dkdv_tile(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, start_m, offs_n, offs_d,
            seq_q, seq_k, head_dim, scale, False, BLOCK, PRECISION,
        )  # fmt: skip
    tl.store(DK + kv_rows, dk * scale, mask=kv_mask)
    tl.store(DV + kv_rows, dv, mask=kv_mask)


@triton.jit
def _dq_tile(
    dq, q, do, lse, delta, K, V, start_n, offs_m, offs_d, seq_q, seq_k, head_dim, scale,
    DIAGONAL: tl.constexpr, BLOCK: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Add one block of keys' share to this query block's dq."""
    offs_n = start_n + tl.arange(0, BLOCK)
    kv_mask = (offs_n[:, None] < seq_k) & (offs_d[None, :] < head_dim)
    k = tl.load(K + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
    p = _probabilities(q, k, lse, offs_m, offs_n, seq_q, seq_k, scale, DIAGONAL, PRECISION)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    return dq


@triton.jit
def dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, seq_q, seq_k, head_dim, scale,
    CAUSAL: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Program (i, bh): dQ of query rows i * BLOCK ... of batch-head bh."""
    start_m = tl.program_id(0) * BLOCK
    bh = tl.program_id(1)
    offs_m = start_m + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    q_rows = bh * seq_q * head_dim + offs_m[:, None] * head_dim + offs_d[None, :]
    q_mask = (offs_m[:, None] < seq_q) & (offs_d[None, :] < head_dim)
    q = tl.load(Q + q_rows, mask=q_mask, other=0.0)
    do = tl.load(DO + q_rows, mask=q_mask, other=0.0)
    lse = tl.load(LSE + bh * seq_q + offs_m, mask=offs_m < seq_q, other=0.0)
    delta = tl.load(DELTA + bh * seq_q + offs_m, mask=offs_m < seq_q, other=0.0)
    dq = tl.zeros([BLOCK, BLOCK_D], dtype=tl.float32)
    k_base = K + bh * seq_k * head_dim
    v_base = V + bh * seq_k * head_dim
    # stage 1: key blocks wholly visible (all of them without CAUSAL)
    stop_full = seq_k
    if CAUSAL:
        stop_full = tl.minimum(start_m, seq_k)
    for start_n in range(0, stop_full, BLOCK):
        dq = _dq_tile(
            dq, q, do, lse, delta, k_base, v_base, start_n, offs_m, offs_d, seq_q, seq_k,
            head_dim, scale, False, BLOCK, PRECISION,
        )  # fmt: skip
    # stage 2 (CAUSAL): the diagonal block, with the causal mask (two ifs: the first is
    # decided when the kernel is compiled, the second when it runs)
    if CAUSAL:  # noqa: SIM102
        if start_m < seq_k:
            dq = _dq_tile(
                dq, q, do, lse, delta, k_base, v_base, start_m, offs_m, offs_d, seq_q, seq_k,
                head_dim, scale, True, BLOCK, PRECISION,
            )  # fmt: skip
    tl.store(DQ + q_rows, dq * scale, mask=q_mask)
