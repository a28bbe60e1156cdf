"""The FlashAttention-2 forward pass as a Triton kernel (Dao, 2023, Algorithm 1).

One program computes one block of ``BLOCK_M`` query rows of one (batch, head) pair: it loads
its queries once, walks over the keys and values in blocks of ``BLOCK_N``, and keeps only a
running row maximum ``m``, a running normaliser ``l`` and an unnormalised output ``acc``
(online softmax). At the end it divides by ``l`` and stores the output and the per-row
log-sum-exp ``lse = m + log(l)``: with q, k, v and the output, that is all the backward pass
needs to recompute any tile of probabilities.

With ``CAUSAL`` (query i sees keys 0..i, aligned top-left as in PyTorch's SDPA), the key blocks
fall into two stages: those left of the query block's first row are wholly visible and need no
causal mask (only keys past ``seq_k`` are masked); those on the diagonal, ``BLOCK_M / BLOCK_N``
of them, need the causal mask; those to the right are skipped. ``BLOCK_M`` must be a multiple
of ``BLOCK_N``, so that stage 1 ends where a key block starts. The tensors are contiguous
(B, H, length, d); head widths that are not a power of two are padded with zeros inside the
kernel by masked loads (``BLOCK_D`` is the next power of two, at least 16).
"""

from attnbook.kernels.runtime import import_triton

triton, tl = import_triton()


@triton.jit
def _forward_tile(
    acc, m_i, l_i, q, k_base, v_base, start_n, offs_m, offs_d, seq_k, head_dim, scale,
    DIAGONAL: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Fold one (BLOCK_M, BLOCK_N) tile of scores into the running (acc, m, l)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kv_mask = (offs_n[:, None] < seq_k) & (offs_d[None, :] < head_dim)
    k = tl.load(k_base + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_base + offs_n[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
    # (BLOCK_M, BLOCK_N) scores of this tile
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    visible = offs_n[None, :] < seq_k
    if DIAGONAL:
        visible = visible & (offs_n[None, :] <= offs_m[:, None])
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, m_new, l_i


@triton.jit
def attention_forward_kernel(
    Q, K, V, Out, LSE, seq_q, seq_k, head_dim, scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Program (i, bh): query rows i * BLOCK_M ... of batch-head bh; writes O and LSE."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    q_base = Q + bh * seq_q * head_dim
    k_base = K + bh * seq_k * head_dim
    v_base = V + bh * seq_k * head_dim
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < seq_q) & (offs_d[None, :] < head_dim)
    q = tl.load(q_base + offs_m[:, None] * head_dim + offs_d[None, :], mask=q_mask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # stage 1: key blocks wholly visible (all of them without CAUSAL)
    stop_full = seq_k
    if CAUSAL:
        stop_full = tl.minimum(start_m, seq_k)
    for start_n in range(0, stop_full, BLOCK_N):
        acc, m_i, l_i = _forward_tile(
            acc, m_i, l_i, q, k_base, v_base, start_n, offs_m, offs_d, seq_k,
            head_dim, scale, False, BLOCK_N, PRECISION,
        )  # fmt: skip
    # stage 2 (CAUSAL): the BLOCK_M / BLOCK_N key blocks on the diagonal, with the causal mask
    if CAUSAL:
        stop_diagonal = tl.minimum(start_m + BLOCK_M, seq_k)
        for start_n in range(start_m, stop_diagonal, BLOCK_N):
            acc, m_i, l_i = _forward_tile(
                acc, m_i, l_i, q, k_base, v_base, start_n, offs_m, offs_d, seq_k,
                head_dim, scale, True, BLOCK_N, PRECISION,
            )  # fmt: skip
    out = acc / l_i[:, None]
    o_base = Out + bh * seq_q * head_dim
    tl.store(o_base + offs_m[:, None] * head_dim + offs_d[None, :], out, mask=q_mask)
    tl.store(LSE + bh * seq_q + offs_m, m_i + tl.log(l_i), mask=offs_m < seq_q)
