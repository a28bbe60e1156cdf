"""Reference answers to chapter 16's kernel exercises, as Triton kernels a reader might write.

Imported only where Triton can run (``exercise_answers.py`` imports this module lazily), so
that the other exercises' tests import on every platform. The switches build the plausible
wrong answers of ``tests/test_exercises.py``.
"""

import math

import torch

from attnbook.kernels.runtime import import_triton

triton, tl = import_triton()
LN2 = math.log(2)


@triton.jit
def causal_flash_kernel(
    Q, K, V, Out, Count, T, S, scale, d: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    MASKED: tl.constexpr, SKIPS: tl.constexpr, STRICT: tl.constexpr, STOP: tl.constexpr,
    ONE_HEAD: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)  # (BM,) query rows
    bh = tl.program_id(1)
    cols = tl.arange(0, d)
    inside = rows[:, None] < T
    q = tl.load(Q + (bh * T + rows[:, None]) * d + cols, mask=inside, other=0.0)
    m = tl.full([BM], float("-inf"), tl.float32)
    norm = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, d], tl.float32)
    stop = S
    if SKIPS:
        if STOP == "first_row":  # a wrong answer: enough only when BM == BN
            stop = tl.minimum(S, tl.program_id(0) * BM + 1)
        elif STOP == "one_key_block":  # a wrong answer: enough only when BM == BN
            stop = tl.minimum(S, tl.program_id(0) * BM + BN)
        else:
            stop = tl.minimum(S, (tl.program_id(0) + 1) * BM)
    for start in range(0, stop, BN):
        if ONE_HEAD:  # a wrong answer: counts the tiles of the first batch-head only
            tl.atomic_add(Count, (bh == 0).to(tl.int32))
        else:
            tl.atomic_add(Count, 1)
        keys = start + tl.arange(0, BN)  # (BN,) key rows of this tile
        kv = (bh * S + keys[:, None]) * d + cols
        k = tl.load(K + kv, mask=keys[:, None] < S, other=0.0)
        v = tl.load(V + kv, mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        seen = keys[None, :] < S
        if MASKED:
            if STRICT:
                seen = seen & (keys[None, :] < rows[:, None])
            else:
                seen = seen & (keys[None, :] <= rows[:, None])
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        norm = norm * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(Out + (bh * T + rows[:, None]) * d + cols, acc / norm[:, None], mask=inside)


def causal_flash(
    q, k, v, BM, BN, *, masked=True, skips=True, strict=False, stop="last_row", one_head=False
):
    B, H, T, d = q.shape
    out = torch.empty_like(q)
    count = torch.zeros(1, dtype=torch.int32, device=q.device)
    grid = (triton.cdiv(T, BM), B * H)
    causal_flash_kernel[grid](
        q, k, v, out, count, T, k.size(2), d**-0.5, d=d, BM=BM, BN=BN,
        MASKED=masked, SKIPS=skips, STRICT=strict, STOP=stop, ONE_HEAD=one_head,
    )  # fmt: skip
    return out, count.item()


@triton.jit
def exp2_kernel(
    Q, K, V, Out, Lse, T, S, scale, d: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    LOG2: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    bh = tl.program_id(1)
    cols = tl.arange(0, d)
    inside = rows[:, None] < T
    q = tl.load(Q + (bh * T + rows[:, None]) * d + cols, mask=inside, other=0.0)
    m = tl.full([BM], float("-inf"), tl.float32)  # running maximum, in base 2
    norm = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, d], tl.float32)
    for start in range(0, S, BN):
        keys = start + tl.arange(0, BN)
        kv = (bh * S + keys[:, None]) * d + cols
        k = tl.load(K + kv, mask=keys[:, None] < S, other=0.0)
        v = tl.load(V + kv, mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        s = tl.where(keys[None, :] < S, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        norm = norm * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(Out + (bh * T + rows[:, None]) * d + cols, acc / norm[:, None], mask=inside)
    lse = m + tl.log2(norm) if LOG2 else m + tl.log(norm)  # LOG2=False: a wrong answer
    tl.store(Lse + bh * T + rows, lse, mask=rows < T)


def flash_exp2(q, k, v, *, fold=True, factor=LN2, log2=True):
    B, H, T, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(B, H, T, device=q.device)
    scale = d**-0.5 * (math.log2(math.e) if fold else 1.0)
    grid = (triton.cdiv(T, 32), B * H)
    exp2_kernel[grid](q, k, v, out, lse, T, k.size(2), scale, d=d, BM=32, BN=32, LOG2=log2)
    return out, lse * factor


@triton.jit
def delta_kernel(
    Out, DO, Delta, T, d: tl.constexpr, BM: tl.constexpr, ONE_HEAD: tl.constexpr,
    SQUARE: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)  # (BM,) query rows
    bh = 0 if ONE_HEAD else tl.program_id(1)  # ONE_HEAD: a wrong answer, no head offset
    inside = rows < T
    offsets = (bh * T + rows[:, None]) * d + tl.arange(0, d)  # (BM, d)
    o = tl.load(Out + offsets, mask=inside[:, None], other=0.0)
    do = tl.load(DO + offsets, mask=inside[:, None], other=0.0)
    delta = tl.sum(o * o, axis=1) if SQUARE else tl.sum(o * do, axis=1)  # SQUARE: wrong
    tl.store(Delta + tl.program_id(1) * T + rows, delta, mask=inside)


def delta_rows(out, grad_out, *, one_head=False, square=False, floor=False):
    B, H, T, d = out.shape
    delta = torch.zeros(B, H, T, device=out.device)  # float32
    programs = T // 32 if floor else triton.cdiv(T, 32)  # floor: a wrong answer
    delta_kernel[(programs, B * H)](
        out, grad_out, delta, T, d=d, BM=32, ONE_HEAD=one_head, SQUARE=square
    )
    return delta


@triton.jit
def dq_kernel(
    Q, K, V, DO, Lse, Delta, DQ, T, S, scale, d: tl.constexpr, BM: tl.constexpr,
    BN: tl.constexpr, SCALED: tl.constexpr, DELTA: tl.constexpr, ONE_HEAD: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)  # (BM,) query rows
    bh = 0 if ONE_HEAD else tl.program_id(1)  # ONE_HEAD: a wrong answer, no head offset
    cols = tl.arange(0, d)
    inside = rows < T
    qo = (bh * T + rows[:, None]) * d + cols
    q = tl.load(Q + qo, mask=inside[:, None], other=0.0)
    do = tl.load(DO + qo, mask=inside[:, None], other=0.0)
    lse = tl.load(Lse + bh * T + rows, mask=inside, other=0.0)
    delta = tl.load(Delta + bh * T + rows, mask=inside, other=0.0)
    dq = tl.zeros([BM, d], tl.float32)
    for start in range(0, S, BN):
        keys = start + tl.arange(0, BN)
        kv = (bh * S + keys[:, None]) * d + cols
        k = tl.load(K + kv, mask=keys[:, None] < S, other=0.0)
        v = tl.load(V + kv, mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        seen = inside[:, None] & (keys[None, :] < S)
        p = tl.exp(tl.where(seen, s - lse[:, None], float("-inf")))
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None]) if DELTA else p * dp  # DELTA=False: a wrong answer
        dq += tl.dot(ds, k, input_precision="ieee")
    dq = dq * scale if SCALED else dq  # SCALED=False: a wrong answer
    out = (tl.program_id(1) * T + rows[:, None]) * d + cols
    tl.store(DQ + out, dq, mask=inside[:, None])


def small_dq(q, k, v, grad_out, *, scaled=True, delta=True, one_head=False, floor=False):
    from attnbook.kernels.attention import attention_forward

    B, H, T, d = q.shape
    S = k.size(2)
    out, lse = attention_forward(q, k, v, False, d**-0.5)
    deltas = (grad_out * out).sum(dim=-1)  # (B, H, T)
    dq = torch.zeros_like(q)
    programs = T // 32 if floor else triton.cdiv(T, 32)  # floor: a wrong answer
    dq_kernel[(programs, B * H)](
        q, k, v, grad_out, lse, deltas, dq, T, S, d**-0.5, d=d, BM=32, BN=32,
        SCALED=scaled, DELTA=delta, ONE_HEAD=one_head,
    )  # fmt: skip
    return dq
