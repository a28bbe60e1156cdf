"""Attention over a sequence split across processes: all-gather, and ring attention.

Each of P ranks holds a shard of the sequence: the same positions of the queries, keys and
values, in the contiguous or zigzag layout of :mod:`attnbook.efficient.sharding`.

:func:`all_gather_attention` gathers every key/value shard and attends locally: simple, but
each rank holds all S keys. :func:`ring_attention` (Liu et al., 2023) keeps the rank's query
shard and passes key/value shards around a ring of ranks, P - 1 point-to-point hops, folding
each block into the output with the online-softmax merge of :mod:`attnbook.efficient.tiled`; besides
its own, a rank never holds more than two key/value shards (the one it computes on and the one
arriving). It is differentiable across ranks: the backward pass sends the key/value shards
around the ring again, each travelling with the partial gradients dk, dv that the ranks it
visits add to it, and a last hop hands them to the shard's owner.
"""

import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from attnbook.core._checks import broadcast_shape, check_attention_inputs, check_choice, shape_of
from attnbook.core.attention import scaled_dot_product_attention
from attnbook.core.memory import TensorMemoryMeter
from attnbook.efficient.launcher import rank_device
from attnbook.efficient.sharding import (
    LAYOUTS,
    chunk_ranges,
    shard_positions,
    shard_sequence,
    unshard_sequence,
)
from attnbook.efficient.tiled import (
    attention_block,
    attention_block_backward,
    merge_partials,
    refuse_graph_of_gradients,
)

METHODS = ("all_gather", "ring")
_NEG_INF = float("-inf")


@dataclass(frozen=True)
class RingStep:
    """What one rank did at one step of the ring.

    ``source``: the rank whose key/value shard it attended to; ``pairs``: the (query chunk,
    key chunk) global chunk indices it computed (chunks of L / P positions, or L / 2P for
    zigzag); ``score_entries``: query-key scores computed per (batch, head); ``bytes_sent``:
    bytes of key and value it sent to the next rank during the step.
    """

    step: int
    source: int
    pairs: tuple[tuple[int, int], ...]
    score_entries: int
    bytes_sent: int


def _group_rank_and_size(group: dist.ProcessGroup | None) -> tuple[int, int]:
    if not dist.is_initialized():
        raise ValueError(
            "group: torch.distributed is not initialised (see attnbook.efficient.launcher)"
        )
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("group: this process is not a member of the group it was given")
    return rank, dist.get_world_size(group)


def _check_lengths(
    lengths: tuple[int, int] | None, query: Tensor, key: Tensor, world_size: int
) -> None:
    """The full lengths (T, S), when given, are the group's size times the shard lengths."""
    if lengths is None:
        return
    shards = (query.size(-2), key.size(-2))
    if tuple(lengths) != (world_size * shards[0], world_size * shards[1]):
        raise ValueError(
            f"group: its {world_size} ranks hold shards of (T/P, S/P) = {shards} positions, "
            f"{world_size * shards[0]} queries and {world_size * shards[1]} keys in all, but "
            f"lengths = {tuple(lengths)}; were the shards cut for another number of ranks?"
        )


def _local_problem(
    query: Tensor, key: Tensor, value: Tensor, layout: str, scale: float | None
) -> str | None:
    """The ValueError message this rank's own arguments deserve, or None if they are fine."""
    try:
        check_attention_inputs(query, key, value, None, False, scale)
        check_choice("layout", layout, LAYOUTS)
        if layout == "zigzag":
            for name, tensor in (("query", query), ("key", key)):
                if tensor.size(-2) % 2:
                    raise ValueError(
                        f"{name}: a zigzag shard holds two equal chunks, so its length must be "
                        f"even, got {name}.shape = {shape_of(tensor)}"
                    )
    except ValueError as error:
        return str(error)
    return None


def _describe(tensor: object) -> tuple:
    """(shape, dtype) of a tensor as plain Python values, or its type name."""
    if isinstance(tensor, Tensor):
        return tuple(tensor.shape), str(tensor.dtype)
    return (type(tensor).__name__,)


def _check_shards(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    layout: str,
    group: dist.ProcessGroup | None,
    lengths: tuple[int, int] | None,
    scale: float | None = None,
) -> tuple[int, int]:
    """Every rank checks its own arguments, then all ranks exchange verdicts and descriptions.

    The verdicts, shapes, dtypes, layouts and scales of every rank are all-gathered, so every
    rank sees the same facts and raises the same ValueError (none waits for a partner that
    gave up): a rank's own bad argument, or shards that differ across ranks. Returns (rank,
    world size).
    """
    rank, world_size = _group_rank_and_size(group)
    problem = _local_problem(query, key, value, layout, scale)
    mine = (problem, [_describe(t) for t in (query, key, value)], layout, scale)
    everyone: list = [None] * world_size
    dist.all_gather_object(everyone, mine, group=group)
    for other, (their_problem, *_) in enumerate(everyone):
        if their_problem is not None:
            if other == rank:
                raise ValueError(their_problem)
            raise ValueError(f"{their_problem} (on rank {other} of the group)")
    _check_alike(everyone)
    _check_lengths(lengths, query, key, world_size)
    return rank, world_size


def _check_alike(everyone: list) -> None:
    """Every rank's shards have the same shapes and dtypes, and the same layout and scale."""
    shapes = [[shape for shape, _ in descriptions] for _, descriptions, _, _ in everyone]
    dtypes = [[dtype for _, dtype in descriptions] for _, descriptions, _, _ in everyone]
    for other in range(len(everyone)):
        if shapes[other] != shapes[0]:
            raise ValueError(
                f"query: every rank must hold shards of the same shapes (query, key, value); "
                f"rank 0 has {shapes[0]}, rank {other} has {shapes[other]}"
            )
        if dtypes[other] != dtypes[0]:
            raise ValueError(
                f"query: every rank must hold shards of the same dtype (query, key, value); "
                f"rank 0 has {dtypes[0]}, rank {other} has {dtypes[other]}"
            )
        for index, name in ((2, "layout"), (3, "scale")):
            if everyone[other][index] != everyone[0][index]:
                raise ValueError(
                    f"{name}: every rank must pass the same {name}; rank 0 passed "
                    f"{everyone[0][index]!r}, rank {other} passed {everyone[other][index]!r}"
                )


def _causal_tile_mask(
    q_range: tuple[int, int], k_range: tuple[int, int], device: torch.device
) -> Tensor | None | bool:
    """False when no query of the tile may see a key of it, None when all may, else the mask.

    Top-left causal, as PyTorch's ``is_causal``: the query at position i sees keys 0 .. i.
    """
    (q_start, q_stop), (k_start, k_stop) = q_range, k_range
    if k_start > q_stop - 1:
        return False
    if k_stop - 1 <= q_start:
        return None
    query_pos = torch.arange(q_start, q_stop, device=device)[:, None]  # (bq, 1)
    key_pos = torch.arange(k_start, k_stop, device=device)[None, :]  # (1, bk)
    return key_pos <= query_pos  # (bq, bk)


def _fold_block(
    state: list[tuple[Tensor, Tensor]],
    query_chunks: list[Tensor],
    q_ranges: list[tuple[int, int]],
    key: Tensor,
    value: Tensor,
    k_ranges: list[tuple[int, int]],
    is_causal: bool,
    scale: float,
) -> list[tuple[int, int]]:
    """Merge one key/value shard into each query chunk's (output, lse); return the tile pairs.

    A pair is (query chunk number, key chunk number) within the rank's shard / the source's.
    """
    pairs = []
    k_len = key.size(-2) // len(k_ranges)
    for i, (q_chunk, q_range) in enumerate(zip(query_chunks, q_ranges, strict=True)):
        for j, k_range in enumerate(k_ranges):
            mask = _causal_tile_mask(q_range, k_range, key.device) if is_causal else None
            if mask is False:
                continue  # every score of the tile is masked: skip it
            k_chunk = key[..., j * k_len : (j + 1) * k_len, :]  # (..., S/P or S/2P, d)
            v_chunk = value[..., j * k_len : (j + 1) * k_len, :]  # (..., S/P or S/2P, d_v)
            partial = attention_block(q_chunk, k_chunk, v_chunk, mask, scale=scale)
            state[i] = merge_partials(*state[i], *partial)  # (..., T/P, d_v), (..., T/P, 1)
            pairs.append((i, j))
    return pairs


def _unfold_block(
    grads: tuple[list[Tensor], Tensor, Tensor],
    saved: tuple[list[Tensor], ...],
    q_ranges: list[tuple[int, int]],
    key: Tensor,
    value: Tensor,
    k_ranges: list[tuple[int, int]],
    is_causal: bool,
    scale: float,
) -> None:
    """Add one key/value shard's tiles to dq (per query chunk) and to the shard's dk, dv.

    ``grads`` = (dq chunks, dk, dv), updated in place; ``saved`` = (query, dO, delta, lse) chunks.
    The same tiles as :func:`_fold_block`, skipped alike.
    """
    grad_query, grad_key, grad_value = grads
    k_len = key.size(-2) // len(k_ranges)
    for i, q_range in enumerate(q_ranges):
        for j, k_range in enumerate(k_ranges):
            mask = _causal_tile_mask(q_range, k_range, key.device) if is_causal else None
            if mask is False:
                continue
            rows = slice(j * k_len, (j + 1) * k_len)  # the key chunk within the shard
            tile = attention_block_backward(
                saved[0][i],
                key[..., rows, :],
                value[..., rows, :],
                *(chunks[i] for chunks in saved[1:]),
                mask,
                scale=scale,
            )  # (..., Tc, d), (..., Sc, d), (..., Sc, d_v)
            grad_query[i] += tile[0]
            grad_key[..., rows, :] += tile[1]
            grad_value[..., rows, :] += tile[2]


def _start_exchange(
    tensors: list[Tensor], rank: int, world_size: int, group: dist.ProcessGroup | None
) -> tuple[list, list[Tensor]]:
    """Send ``tensors`` to the next rank, receive the previous rank's alike: non-blocking.

    Returns the pending transfers (call ``wait()`` on each) and the buffers being filled.
    """
    world = group if group is not None else dist.group.WORLD
    next_rank = dist.get_global_rank(world, (rank + 1) % world_size)
    previous_rank = dist.get_global_rank(world, (rank - 1) % world_size)
    incoming = [torch.empty_like(tensor) for tensor in tensors]  # the previous rank's
    operations = [dist.P2POp(dist.isend, tensor, next_rank, group) for tensor in tensors]
    operations += [dist.P2POp(dist.irecv, buffer, previous_rank, group) for buffer in incoming]
    return dist.batch_isend_irecv(operations), incoming


def _finish(exchange: list) -> None:
    for work in exchange:
        work.wait()


def _ring_step(
    step: int,
    source: int,
    pairs: list[tuple[int, int]],
    q_ranges: list[tuple[int, int]],
    k_ranges: list[tuple[int, int]],
    bytes_sent: int,
) -> RingStep:
    """The :class:`RingStep` of a step: local chunk pairs turned into global chunk numbers."""
    q_len, k_len = q_ranges[0][1] - q_ranges[0][0], k_ranges[0][1] - k_ranges[0][0]
    global_pairs = tuple((q_ranges[i][0] // q_len, k_ranges[j][0] // k_len) for i, j in pairs)
    return RingStep(step, source, global_pairs, len(pairs) * q_len * k_len, bytes_sent)


def ring_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    layout: str = "contiguous",
    group: dist.ProcessGroup | None = None,
    scale: float | None = None,
    lengths: tuple[int, int] | None = None,
    record: list[RingStep] | None = None,
) -> Tensor:
    """Exact attention for this rank's query shard over the keys of every rank, by a ring.

    query (..., T/P, d), key (..., S/P, d), value (..., S/P, d_v): this rank's shards in the
    given ``layout`` (:func:`shard_sequence`), alike on every rank of ``group`` (default: all).
    Returns this rank's shard of softmax(q k^T * scale) v over the full sequence, (..., T/P,
    d_v). ``is_causal``: top-left causal over global positions, as PyTorch's ``is_causal``;
    tiles that are fully masked are skipped.

    At step s = 0 .. P - 1 the rank holds the key/value shard of rank (rank - s) mod P. It
    starts sending that shard to rank + 1 and receiving the next one from rank - 1, computes
    the partial attention of its query chunks over the shard's key chunks and merges it in
    (:func:`attnbook.efficient.tiled.merge_partials`), then waits for the transfer. Float16 and
    bfloat16 are computed in float32. ``lengths``: the full (T, S), if known, checked against
    the group's size. ``record``: a list that gets one :class:`RingStep` per step.

    Differentiable across ranks: every rank of the group must run the backward pass (it is a
    second ring, see :func:`_ring_backward`), and each gets the gradients of its own shards,
    equal to the matching slices of the gradients of attention over the full sequence. Only
    first-order gradients: with ``create_graph=True`` the backward pass raises a RuntimeError
    on every rank rather than silently drop the second-order terms.

    Raises ValueError (on every rank alike) if any rank's arguments are bad (the message says
    which rank), the shards differ across ranks in shape or dtype, the ranks pass different
    layouts or scales, a zigzag shard has an odd length, or ``lengths`` does not match P times
    the shard lengths.
    """
    rank, world_size = _check_shards(query, key, value, layout, group, lengths, scale)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    plan = _RingPlan(rank, world_size, group, layout, is_causal, scale)
    return _RingAttention.apply(query, key, value, plan, record)


@dataclass(frozen=True)
class _RingPlan:
    """Who this rank is in which ring, and what it computes."""

    rank: int
    world_size: int
    group: dist.ProcessGroup | None
    layout: str
    is_causal: bool
    scale: float

    def ranges(self, length: int, rank: int, name: str) -> list[tuple[int, int]]:
        return chunk_ranges(length * self.world_size, self.world_size, self.layout, name)[rank]


def _ring_forward(
    query: Tensor, key: Tensor, value: Tensor, plan: _RingPlan, record: list | None
) -> tuple[Tensor, Tensor]:
    """The forward ring in the working dtype: output (..., T/P, d_v) and lse (..., T/P, 1)."""
    work_dtype = torch.promote_types(query.dtype, torch.float32)
    q_ranges = plan.ranges(query.size(-2), plan.rank, "query")
    query_chunks = query.to(work_dtype).chunk(len(q_ranges), dim=-2)  # (..., T/P or T/2P, d)
    batch_shape = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    chunk_len = query_chunks[0].size(-2)
    empty = query_chunks[0].new_zeros((*batch_shape, chunk_len, value.size(-1)))  # (..., Tc, d_v)
    no_keys = empty.new_full((*batch_shape, chunk_len, 1), _NEG_INF)  # (..., Tc, 1)
    state = [(empty, no_keys)] * len(q_ranges)  # per query chunk: partial output and lse
    current = [key.contiguous(), value.contiguous()]  # (..., S/P, d), (..., S/P, d_v)
    for step in range(plan.world_size):
        source = (plan.rank - step) % plan.world_size
        exchange = None
        if step < plan.world_size - 1:
            exchange, incoming = _start_exchange(current, plan.rank, plan.world_size, plan.group)
        k_ranges = plan.ranges(key.size(-2), source, "key")
        key_block, value_block = (t.to(work_dtype) for t in current)
        pairs = _fold_block(
            state,
            query_chunks,
            q_ranges,
            key_block,
            value_block,
            k_ranges,
            plan.is_causal,
            plan.scale,
        )
        if record is not None:
            sent = 0 if exchange is None else current[0].nbytes + current[1].nbytes
            record.append(_ring_step(step, source, pairs, q_ranges, k_ranges, sent))
        if exchange is not None:
            _finish(exchange)
            current = incoming
    output = torch.cat([out for out, _ in state], dim=-2)  # (..., T/P, d_v)
    lse = torch.cat([lse for _, lse in state], dim=-2)  # (..., T/P, 1)
    return output, lse


def _ring_backward(
    grad_output: Tensor, saved: tuple[Tensor, ...], plan: _RingPlan
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of this rank's shards, by a second trip around the ring.

    At step s the rank holds the key/value shard of rank (rank - s) mod P together with the
    dk, dv that the ranks before it added; it adds its own queries' share
    (:func:`_unfold_block`) and passes all four on, while dq stays and accumulates here. The
    next shard's k, v start moving before the compute; the gradients move after it and are
    waited on at once, not overlapped (they are complete only once the step has added to them).
    After P steps each dk, dv has visited every rank and arrived at its owner.
    """
    query, key, value, output, lse = saved
    work_dtype = output.dtype
    q_ranges = plan.ranges(query.size(-2), plan.rank, "query")
    n_chunks = len(q_ranges)
    grad_output = grad_output.to(work_dtype)  # (..., T/P, d_v)
    row_dot = (grad_output * output).sum(dim=-1, keepdim=True)  # (..., T/P, 1): delta
    saved_chunks = tuple(
        t.chunk(n_chunks, dim=-2) for t in (query.to(work_dtype), grad_output, row_dot, lse)
    )  # query, dO, delta and lse, per query chunk
    batch_shape = output.shape[:-2]
    grad_query = [
        c.new_zeros((*batch_shape, *c.shape[-2:])) for c in saved_chunks[0]
    ]  # per chunk (..., Tc, d)
    current = [key.contiguous(), value.contiguous()]  # (..., S/P, d), (..., S/P, d_v)
    grad_key = output.new_zeros((*batch_shape, *key.shape[-2:]))  # (..., S/P, d)
    grad_value = output.new_zeros((*batch_shape, *value.shape[-2:]))  # (..., S/P, d_v)
    for step in range(plan.world_size):
        source = (plan.rank - step) % plan.world_size
        exchange = None
        if step < plan.world_size - 1:
            exchange, incoming = _start_exchange(current, plan.rank, plan.world_size, plan.group)
        k_ranges = plan.ranges(key.size(-2), source, "key")
        key_block, value_block = (t.to(work_dtype) for t in current)
        _unfold_block(
            (grad_query, grad_key, grad_value),
            saved_chunks,
            q_ranges,
            key_block,
            value_block,
            k_ranges,
            plan.is_causal,
            plan.scale,
        )
        if plan.world_size > 1:
            gradients, arrived = _start_exchange(
                [grad_key, grad_value], plan.rank, plan.world_size, plan.group
            )
            _finish(gradients)
            grad_key, grad_value = arrived
        if exchange is not None:
            _finish(exchange)
            current = incoming
    return torch.cat(grad_query, dim=-2), grad_key, grad_value


class _RingAttention(torch.autograd.Function):
    """Ring attention with a ring backward: saves q, k, v shards, the output and lse."""

    @staticmethod
    def forward(ctx, query, key, value, plan, record):
        output, lse = _ring_forward(query, key, value, plan, record)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.plan = plan
        return output.to(value.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        refuse_graph_of_gradients("ring_attention")
        grads = _ring_backward(grad_output, ctx.saved_tensors, ctx.plan)
        inputs = ctx.saved_tensors[:3]
        reduced = [
            grad.sum_to_size(tensor.shape).to(tensor.dtype)
            for grad, tensor in zip(grads, inputs, strict=True)
        ]  # each gradient summed over the batch dims its input broadcast along
        return (*reduced, None, None)


class _AllGather(torch.autograd.Function):
    """``dist.all_gather`` with a backward pass: the shards of every rank, stacked.

    Forward: this rank's shard (...) -> (P, ...), rank r's shard at index r. Every rank's
    output depends on every shard, so the gradient of this rank's shard is the sum over ranks
    of the gradient each one holds for index ``rank``: an all-reduce, then this rank's slice.
    """

    @staticmethod
    def forward(ctx, shard, rank, world_size, group):
        ctx.rank, ctx.group = rank, group
        gathered = [torch.empty_like(shard) for _ in range(world_size)]  # P x (...)
        dist.all_gather(gathered, shard.contiguous(), group=group)
        return torch.stack(gathered)  # (P, ...)

    @staticmethod
    def backward(ctx, grad_gathered):
        refuse_graph_of_gradients("all_gather_attention")
        summed = grad_gathered.contiguous().clone()  # (P, ...), reduced in place
        dist.all_reduce(summed, group=ctx.group)
        return summed[ctx.rank], None, None, None


def all_gather_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    layout: str = "contiguous",
    group: dist.ProcessGroup | None = None,
    scale: float | None = None,
    lengths: tuple[int, int] | None = None,
) -> Tensor:
    """The simple version: gather every rank's key/value shard, then attend locally.

    Same shards, result and mask convention as :func:`ring_attention`: query (..., T/P, d),
    key (..., S/P, d), value (..., S/P, d_v) -> (..., T/P, d_v). Each rank holds the full key
    and value, (..., S, d) and (..., S, d_v), and its (..., T/P, S) scores: memory per rank
    still grows with S. ``lengths`` and errors as in :func:`ring_attention`. Uses the explicit
    :func:`attnbook.scaled_dot_product_attention`.

    Differentiable across ranks, as training with it needs: the query's gradient is local, and
    the gathers' backward pass sums every rank's gradient of each key/value shard and hands it
    to the shard's owner (an all-reduce), so every rank of the group must run the backward
    pass. Only first-order gradients: ``create_graph=True`` raises a RuntimeError.
    """
    rank, world_size = _check_shards(query, key, value, layout, group, lengths, scale)
    # P x (..., S/P, d) and P x (..., S/P, d_v): every rank's shard
    keys = _AllGather.apply(key, rank, world_size, group).unbind(0)
    values = _AllGather.apply(value, rank, world_size, group).unbind(0)
    full_key = unshard_sequence(list(keys), layout)  # (..., S, d)
    full_value = unshard_sequence(list(values), layout)  # (..., S, d_v)
    mask = None
    if is_causal:
        T, S = query.size(-2) * world_size, key.size(-2) * world_size
        query_pos = shard_positions(T, rank, world_size, layout).to(query.device)  # (T/P,)
        key_pos = torch.arange(S, device=query.device)  # (S,)
        mask = key_pos[None, :] <= query_pos[:, None]  # (T/P, S)
    output, _ = scaled_dot_product_attention(query, full_key, full_value, mask, scale=scale)
    return output  # (..., T/P, d_v)


@dataclass(frozen=True)
class RankResult:
    """One rank's run of one case: its output shard, peak extra bytes, seconds and steps; for
    a case run with its backward pass, also its gradient shards (dq, dk, dv) and the peak
    extra bytes of forward + backward."""

    output: Tensor
    peak_bytes: int
    seconds: float
    steps: tuple[RingStep, ...]
    grads: tuple[Tensor, ...] | None = None
    training_peak_bytes: int | None = None


def run_cases(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    cases: list[tuple],
    grad_output: Tensor | None = None,
) -> list[RankResult]:
    """Worker for :func:`attnbook.efficient.launcher.launch`: shard the full inputs, run every case.

    query (..., T, d), key (..., S, d), value (..., S, d_v): the full tensors, the same on
    every rank. Each case is (method, is_causal, layout) with method "ring" or "all_gather",
    or (method, is_causal, layout, True) for a ring case that also runs the backward pass,
    with this rank's shard of ``grad_output`` (..., T, d_v) as the output's gradient. Each
    runs under a :class:`attnbook.TensorMemoryMeter` (peak bytes of the tensors it creates,
    its shards excluded), the forward pass and forward + backward metered apart; returns one
    :class:`RankResult` per case, tensors on the CPU.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    lengths = (query.size(-2), key.size(-2))
    results = []
    for method, is_causal, layout, *backward in cases:
        check_choice("method", method, METHODS)
        backward = bool(backward and backward[0])
        if backward and (method != "ring" or grad_output is None):
            raise ValueError(
                f"cases: the backward pass runs for ring cases given a grad_output, got case "
                f"{(method, is_causal, layout, True)} with grad_output={type(grad_output).__name__}"
            )
        shards = [
            shard_sequence(tensor, rank, world_size, layout, name).to(rank_device())
            for tensor, name in ((query, "query"), (key, "key"), (value, "value"))
        ]  # (..., T/P, d), (..., S/P, d), (..., S/P, d_v)
        shards = [shard.requires_grad_(backward) for shard in shards]
        steps: list[RingStep] = []
        options = {"is_causal": is_causal, "layout": layout, "lengths": lengths}
        with TensorMemoryMeter() as training:
            start = time.perf_counter()
            with TensorMemoryMeter() as meter:
                if method == "ring":
                    output = ring_attention(*shards, **options, record=steps)
                else:
                    output = all_gather_attention(*shards, **options)
            seconds = time.perf_counter() - start
            if backward:
                grad = shard_sequence(grad_output, rank, world_size, layout, "grad_output")
                output.backward(grad.to(rank_device()))
        grads = tuple(shard.grad.cpu() for shard in shards) if backward else None
        training_peak = training.peak_bytes if backward else None
        output = output.detach().cpu()
        results.append(
            RankResult(output, meter.peak_bytes, seconds, tuple(steps), grads, training_peak)
        )
    return results


def gather_outputs(per_rank: list[list[RankResult]], case: int, layout: str) -> Tensor:
    """The full output (..., T, d_v) of case number ``case`` from every rank's results."""
    return unshard_sequence([results[case].output for results in per_rank], layout)
