"""Memory-efficient attention in plain PyTorch: online softmax and tiled attention.

:func:`online_softmax` computes a softmax with the normaliser found in one pass over blocks: a
running maximum and a running sum that is rescaled whenever the maximum grows (Milakov and
Gimelshein, 2018). :func:`tiled_attention` applies the same idea to attention, in the manner of
FlashAttention (Dao et al., 2022): it walks over blocks of keys and values and never holds the
(T, S) matrix of scores, only one (block_q, block_k) tile of it at a time. So does its backward
pass, which recomputes each tile from the saved per-row log-sum-exp instead of storing the
probabilities. The loop order (query blocks outer) is FlashAttention-2's (Dao, 2023); the
running state is a partial result, the output normalised over the keys seen so far with its
log-sum-exp, merged tile by tile, rather than an unnormalised sum divided once at the end. Its
two forward steps are public, because ring attention (:mod:`attnbook.efficient.ring`) reuses them
across
processes:
:func:`attention_block` gives a partial result (output, log-sum-exp) over one block of keys,
:func:`merge_partials` combines two partial results exactly, and
:func:`attention_block_backward` gives one block's share of the gradients.
"""

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from attnbook.core._checks import broadcast_shape, check_attention_inputs, check_floating, check_int
from attnbook.core.masks import ALIGNMENTS

_NEG_INF = float("-inf")


def online_softmax(scores: Tensor, block_size: int = 128) -> Tensor:
    """Softmax over the last dim, its normaliser computed in one pass over blocks of columns.

    For each block the running maximum m and the running sum l of exp(x - m) are updated:
    ``m_new = max(m, max(block))``, ``l = l * exp(m - m_new) + sum(exp(block - m_new))``. After
    the last block, ``softmax(x) = exp(x - m) / l``. Entries equal to -inf get zero weight, and a
    row with every entry -inf becomes all zeros (as :func:`attnbook.masked_softmax`). Scores
    must be floating point: integer, bool and complex scores are refused with a ValueError.
    """
    check_int("block_size", block_size)
    if not isinstance(scores, Tensor) or scores.dim() < 1:
        raise ValueError("scores: expected a tensor with at least 1 dim (..., S)")
    check_floating("scores", scores)
    running_max = scores.new_full(scores.shape[:-1], _NEG_INF)  # (...,)
    running_sum = scores.new_zeros(scores.shape[:-1])  # (...,)
    for start in range(0, scores.size(-1), block_size):
        block = scores[..., start : start + block_size]  # (..., block)
        new_max = torch.maximum(running_max, block.amax(dim=-1))  # (...,)
        safe_max = torch.where(new_max == _NEG_INF, 0.0, new_max)  # (...,)
        rescale = torch.exp(running_max - safe_max)  # (...,): 0 while the row saw only -inf
        block_sum = torch.exp(block - safe_max[..., None]).sum(dim=-1)  # (...,)
        running_sum = running_sum * rescale + block_sum
        running_max = new_max
    safe_max = torch.where(running_max == _NEG_INF, 0.0, running_max)  # (...,)
    safe_sum = torch.where(running_sum > 0, running_sum, 1.0)  # (...,)
    return torch.exp(scores - safe_max[..., None]) / safe_sum[..., None]  # (..., S)


def _block_mask(
    mask: Tensor | None,
    causal_offset: int | None,
    q_start: int,
    q_stop: int,
    k_start: int,
    k_stop: int,
    device: torch.device,
) -> Tensor | None:
    """The mask of one (block_q, block_k) tile: the user's mask sliced, or the causal one.

    The caller's checks refuse a mask together with ``is_causal``, so at most one is given.
    """
    if mask is not None:
        rows = mask[..., q_start:q_stop, :] if mask.dim() >= 2 and mask.size(-2) > 1 else mask
        return rows[..., k_start:k_stop] if rows.size(-1) > 1 else rows  # (..., bq, bk)
    if causal_offset is None:
        return None
    query_pos = torch.arange(q_start, q_stop, device=device)[:, None]  # (bq, 1)
    key_pos = torch.arange(k_start, k_stop, device=device)[None, :]  # (1, bk)
    return key_pos <= query_pos + causal_offset  # (bq, bk)


def attention_block(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *, scale: float
) -> tuple[Tensor, Tensor]:
    """Attention of a block of queries over one block of keys, as a partial result.

    query (..., bq, d), key (..., bk, d), value (..., bk, d_v); mask None, boolean (True =
    attend) or floating (added), broadcastable to (..., bq, bk). Returns ``(output, lse)``:
    output (..., bq, d_v) is softmax(q k^T * scale + mask) v over this block's keys only, and
    lse (..., bq, 1) is the log of the softmax's normaliser, log(sum_j exp(score_j)). A row with
    no key to attend to gets output 0 and lse -inf, and finite gradients. Partial results over
    disjoint key blocks combine exactly with :func:`merge_partials`. No input checks: this is
    the inner step of :func:`tiled_attention` and :func:`attnbook.efficient.ring.ring_attention`.
    """
    scores = query @ key.transpose(-2, -1) * scale  # (..., bq, bk)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, _NEG_INF)
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)
    row_max = scores.amax(dim=-1, keepdim=True)  # (..., bq, 1)
    safe_max = torch.where(row_max == _NEG_INF, 0.0, row_max)  # (..., bq, 1)
    probabilities = torch.exp(scores - safe_max)  # (..., bq, bk), unnormalised
    row_sum = probabilities.sum(dim=-1, keepdim=True)  # (..., bq, 1)
    safe_sum = torch.where(row_sum > 0, row_sum, 1.0)  # (..., bq, 1)
    output = probabilities @ value / safe_sum  # (..., bq, d_v)
    lse = torch.where(row_sum > 0, safe_max + torch.log(safe_sum), _NEG_INF)  # (..., bq, 1)
    return output, lse


def merge_partials(
    output_a: Tensor, lse_a: Tensor, output_b: Tensor, lse_b: Tensor
) -> tuple[Tensor, Tensor]:
    """Combine the attention of the same queries over two disjoint sets of keys, exactly.

    output_a, output_b (..., T, d_v) are each normalised over their own keys, with log
    normalisers lse_a, lse_b (..., T, 1) (from :func:`attention_block`, or a previous merge).
    The result is the attention over the union of the keys: lse = log(exp(lse_a) +
    exp(lse_b)), output = output_a * exp(lse_a - lse) + output_b * exp(lse_b - lse). This is
    the online-softmax step: rows are rescaled by their share of the joint normaliser. Rows
    with lse -inf on both sides (nothing to attend to) stay 0 with lse -inf, gradients finite.
    Returns ``(output, lse)`` with the broadcast shapes.
    """
    new_max = torch.maximum(lse_a, lse_b)  # (..., T, 1)
    safe_max = torch.where(new_max == _NEG_INF, 0.0, new_max)  # (..., T, 1)
    weight_a = torch.exp(lse_a - safe_max)  # (..., T, 1), in [0, 1]
    weight_b = torch.exp(lse_b - safe_max)  # (..., T, 1)
    total = weight_a + weight_b  # (..., T, 1), in [1, 2] unless both are empty
    safe_total = torch.where(total > 0, total, 1.0)  # (..., T, 1)
    output = (output_a * weight_a + output_b * weight_b) / safe_total  # (..., T, d_v)
    lse = torch.where(total > 0, safe_max + torch.log(safe_total), _NEG_INF)  # (..., T, 1)
    return output, lse


def attention_block_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    grad_output: Tensor,
    row_dot: Tensor,
    lse: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """One tile's share of the gradients, its probabilities recomputed from the saved lse.

    query (..., bq, d), key (..., bk, d), value (..., bk, d_v), mask as in
    :func:`attention_block`; grad_output dO (..., bq, d_v) is the gradient of the *full*
    output of these queries, row_dot (..., bq, 1) is delta = rowsum(dO * O) over that full
    output, and lse (..., bq, 1) its log-sum-exp over all keys. Then the weights
    A = exp(scores - lse) are this tile's entries of the full softmax, and the returned
    (dq, dk, dv) are the tile's terms of dq = dZ k * scale, dk = dZ^T q * scale and
    dv = A^T dO, with dZ = A * (dO v^T - delta) the gradient of the scores Z.
    Summed over every tile they are the exact gradients. Rows with lse -inf give zeros.
    """
    scores = query @ key.transpose(-2, -1) * scale  # (..., bq, bk)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, _NEG_INF)
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)
    safe_lse = torch.where(lse == _NEG_INF, 0.0, lse)  # (..., bq, 1): empty rows give P = 0
    probabilities = torch.exp(scores - safe_lse)  # (..., bq, bk)
    grad_value = probabilities.transpose(-2, -1) @ grad_output  # (..., bk, d_v)
    grad_probabilities = grad_output @ value.transpose(-2, -1)  # (..., bq, bk)
    grad_scores = probabilities * (grad_probabilities - row_dot)  # (..., bq, bk)
    grad_query = grad_scores @ key * scale  # (..., bq, d)
    grad_key = grad_scores.transpose(-2, -1) @ query * scale  # (..., bk, d)
    return grad_query, grad_key, grad_value


def _tiles(
    T: int, S: int, block_q: int, block_k: int, causal_offset: int | None
) -> list[tuple[int, int, int, int]]:
    """(q_start, q_stop, k_start, k_stop) of every tile to compute, query blocks outer.

    Under a causal mask the key blocks that no query of a block may see are left out.
    """
    tiles = []
    for q_start in range(0, T, block_q):
        q_stop = min(q_start + block_q, T)
        k_end = S if causal_offset is None else max(0, min(S, q_stop + causal_offset))
        for k_start in range(0, k_end, block_k):
            tiles.append((q_start, q_stop, k_start, min(k_start + block_k, S)))
    return tiles


def _tile_blocks(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    causal_offset: int | None,
    block_q: int,
    block_k: int,
    work_dtype: torch.dtype,
) -> Iterator[tuple[slice, slice, Tensor, Tensor, Tensor, Tensor | None]]:
    """For every tile of :func:`_tiles`: its rows, columns, q, k and v blocks, and its mask."""
    for tile in _tiles(query.size(-2), key.size(-2), block_q, block_k, causal_offset):
        q_start, q_stop, k_start, k_stop = tile
        rows, cols = slice(q_start, q_stop), slice(k_start, k_stop)
        q_block = query[..., rows, :].to(work_dtype)  # (..., bq, d)
        k_block = key[..., cols, :].to(work_dtype)  # (..., bk, d)
        v_block = value[..., cols, :].to(work_dtype)  # (..., bk, d_v)
        tile_mask = _block_mask(mask, causal_offset, *tile, query.device)  # (..., bq, bk)
        yield rows, cols, q_block, k_block, v_block, tile_mask


def _tiled_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    causal_offset: int | None,
    scale: float,
    block_q: int,
    block_k: int,
) -> tuple[Tensor, Tensor]:
    """The forward pass in the working dtype: output (..., T, d_v) and lse (..., T, 1)."""
    T = query.size(-2)
    work_dtype = torch.promote_types(query.dtype, torch.float32)
    batch_shape = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    output = query.new_zeros((*batch_shape, T, value.size(-1)), dtype=work_dtype)  # (..., T, dv)
    lse = query.new_full((*batch_shape, T, 1), _NEG_INF, dtype=work_dtype)  # (..., T, 1)
    blocks = _tile_blocks(query, key, value, mask, causal_offset, block_q, block_k, work_dtype)
    for rows, _, q_block, k_block, v_block, tile_mask in blocks:
        partial = attention_block(q_block, k_block, v_block, tile_mask, scale=scale)
        output[..., rows, :], lse[..., rows, :] = merge_partials(
            output[..., rows, :], lse[..., rows, :], *partial
        )
    return output, lse


def _tiled_backward(
    grad_output: Tensor,
    saved: tuple[Tensor, ...],
    mask: Tensor | None,
    causal_offset: int | None,
    scale: float,
    block_q: int,
    block_k: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv from the saved q, k, v, output and lse, one recomputed tile at a time.

    delta = rowsum(dO * O) once, then :func:`attention_block_backward` per tile. Gradients are in
    the broadcast batch shape and the working dtype.
    """
    query, key, value, output, lse = saved
    work_dtype = output.dtype
    grad_output = grad_output.to(work_dtype)  # (..., T, d_v)
    row_dot = (grad_output * output).sum(dim=-1, keepdim=True)  # (..., T, 1): delta
    batch_shape = output.shape[:-2]
    grad_query = query.new_zeros((*batch_shape, *query.shape[-2:]), dtype=work_dtype)
    grad_key = key.new_zeros((*batch_shape, *key.shape[-2:]), dtype=work_dtype)
    grad_value = value.new_zeros((*batch_shape, *value.shape[-2:]), dtype=work_dtype)
    blocks = _tile_blocks(query, key, value, mask, causal_offset, block_q, block_k, work_dtype)
    for rows, cols, q_block, k_block, v_block, tile_mask in blocks:
        grads = attention_block_backward(
            q_block,
            k_block,
            v_block,
            grad_output[..., rows, :],
            row_dot[..., rows, :],
            lse[..., rows, :],
            tile_mask,
            scale=scale,
        )  # (..., bq, d), (..., bk, d), (..., bk, d_v)
        grad_query[..., rows, :] += grads[0]
        grad_key[..., cols, :] += grads[1]
        grad_value[..., cols, :] += grads[2]
    return grad_query, grad_key, grad_value


def refuse_graph_of_gradients(name: str) -> None:
    """Raise inside a custom backward pass that is asked to build a graph of its gradients.

    The backward passes of :func:`tiled_attention` and ring attention are not themselves
    differentiable: with ``create_graph=True`` (a gradient penalty, a Hessian-vector product)
    autograd would return gradients without their second-order terms and say nothing. Autograd
    runs a backward pass with grad mode on exactly when ``create_graph=True``.
    """
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"{name}: no second-order gradients: its backward pass is not differentiable, so "
            "autograd.grad(..., create_graph=True) through it would silently drop the "
            "second-order terms. Use attnbook.scaled_dot_product_attention where a gradient "
            "of a gradient is needed"
        )


class _TiledAttention(torch.autograd.Function):
    """Tiled attention with a memory-efficient backward: saves q, k, v, the output and lse."""

    @staticmethod
    def forward(ctx, query, key, value, mask, causal_offset, scale, block_q, block_k):
        output, lse = _tiled_forward(
            query, key, value, mask, causal_offset, scale, block_q, block_k
        )  # (..., T, d_v), (..., T, 1)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.options = (mask, causal_offset, scale, block_q, block_k)
        return output.to(value.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        refuse_graph_of_gradients("tiled_attention")
        grads = _tiled_backward(grad_output, ctx.saved_tensors, *ctx.options)
        inputs = ctx.saved_tensors[:3]
        reduced = [
            grad.sum_to_size(tensor.shape).to(tensor.dtype) if needed else None
            for grad, tensor, needed in zip(grads, inputs, ctx.needs_input_grad[:3], strict=True)
        ]  # each gradient summed over the batch dims its input broadcast along
        return (*reduced, None, None, None, None, None)


def tiled_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    causal_align: str = "top-left",
    scale: float | None = None,
    block_q: int = 256,
    block_k: int = 256,
) -> Tensor:
    """Exact softmax(q k^T * scale + mask) v without ever holding the (..., T, S) scores.

    Shapes as in :func:`attnbook.scaled_dot_product_attention`: query (..., T, d), key
    (..., S, d), value (..., S, d_v); returns only the output (..., T, d_v). There are no
    weights to return: they never exist as one tensor.

    For each block of ``block_q`` queries, the key/value blocks of ``block_k`` keys are visited
    in order: each tile gives a partial result, its output and the log of its softmax
    normaliser (:func:`attention_block`), and :func:`merge_partials` folds it into the running
    one, rescaling both by their share of the joint normaliser. Extra memory is
    the output plus one (..., block_q, block_k) tile: linear in T for fixed block sizes.

    Differentiable with the same memory: autograd keeps only q, k, v, the output and the
    per-row log-sum-exp (..., T, 1); the backward pass recomputes each tile's probabilities
    from the log-sum-exp and accumulates dq, dk, dv tile by tile (FlashAttention's backward,
    Dao et al., 2022, Algorithm 4, with the forward's query blocks outer loop, where
    FlashAttention-2 puts the key/value blocks outside). A mask gets no gradient.
    Only first-order gradients: that backward pass is not itself differentiable, so
    ``torch.autograd.grad(..., create_graph=True)`` through it raises a RuntimeError (every
    time) rather than return gradients that silently lack their second-order terms.

    mask: boolean (True = attend) or floating (added), broadcastable to (..., T, S), as in the
    library's explicit function. ``is_causal``: query i sees keys 0..i (``causal_align=
    "top-left"``, PyTorch's ``is_causal``) or 0..i + S - T (``"bottom-right"``, what a KV cache
    needs); the causal mask is made per tile, and key blocks that no query of a block may see
    are skipped. A query row with nothing to attend to gets a zero output, never NaN. Float16 and
    bfloat16 are computed in float32, and the output has the value's dtype.
    """
    check_attention_inputs(query, key, value, mask, is_causal, scale)
    check_int("block_q", block_q)
    check_int("block_k", block_k)
    if causal_align not in ALIGNMENTS:
        raise ValueError(f"causal_align: expected one of {ALIGNMENTS}, got {causal_align!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    T, S = query.size(-2), key.size(-2)
    causal_offset = None
    if is_causal:
        causal_offset = 0 if causal_align == "top-left" else S - T
    return _TiledAttention.apply(query, key, value, mask, causal_offset, scale, block_q, block_k)
