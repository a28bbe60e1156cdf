"""Continuous batching (Orca's iteration-level scheduling) over a paged KV cache.

A :class:`ServingEngine` keeps a queue of waiting requests and a batch of running ones. Every
step it admits waiting requests while the batch has room and the pool has blocks (computing
their prompts, "prefill"), runs *one* batched forward pass that gives every running sequence one
more token, and retires the sequences that are done, returning their blocks at once (Yu et al.,
2022). When a running sequence needs a block and none is free, the youngest running sequence is
preempted: its blocks are freed and it waits again, to be recomputed later (vLLM's recompute
preemption). ``static=True`` is the older request-level batching for comparison: a batch is
admitted only when the previous one has finished, and every row runs as long as the batch's
longest request. Decoding is greedy, so every output equals the request decoded alone.
"""

import math
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import nn

from attnbook.core._checks import check_bool, check_int
from attnbook.serving.paged_cache import CacheFullError, PagedKVCache
from attnbook.serving.paged_model import check_pageable, paged_forward
from attnbook.serving.prefix_sharing import PrefixTable, block_hashes


@dataclass
class Request:
    """One request: its tokens so far (prompt, then generated ones) and how many to generate."""

    seq_id: int
    tokens: list[int]
    n_prompt: int
    max_new: int
    n_cached: int = 0  # positions whose keys and values are in the cache
    pending_step: int | None = None  # the decode step that chose its last token, if one did

    @property
    def n_generated(self) -> int:
        return len(self.tokens) - self.n_prompt

    @property
    def done(self) -> bool:
        return self.n_generated >= self.max_new


@dataclass
class ServeStats:
    """What a run did: batched decode steps, prompt tokens computed and reused, blocks, etc.

    ``schedule`` has one entry per batched decoding step: the requests (by index) with a row in
    it, in row order, each mapped to whether its row's token is kept (``False`` for a static
    batch's padding rows, requests already done, and for a token dropped when its request was
    preempted before it was written: the next prefill chooses it again).
    """

    steps: int = 0
    prefill_tokens: int = 0
    shared_tokens: int = 0
    preemptions: int = 0
    peak_used_blocks: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    schedule: list[dict[int, bool]] = field(default_factory=list)


def check_requests(model: nn.Module, prompts: object, max_new_tokens: object) -> list[int]:
    """The prompts are lists of valid token ids; one ``max_new_tokens`` (int) or one per prompt."""
    if not isinstance(prompts, list | tuple) or not prompts:
        raise ValueError(f"prompts: expected a non-empty list of token lists, got {prompts!r}")
    for index, prompt in enumerate(prompts):
        ids = list(prompt) if isinstance(prompt, list | tuple) else None
        if not ids or any(
            isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < model.vocab_size
            for t in ids
        ):
            raise ValueError(
                f"prompts: prompt {index} must be a non-empty list of ints in "
                f"[0, vocab_size = {model.vocab_size}), got {prompt!r}"
            )
    if isinstance(max_new_tokens, list | tuple):
        if len(max_new_tokens) != len(prompts):
            raise ValueError(
                f"max_new_tokens: expected one per prompt ({len(prompts)}), got "
                f"{len(max_new_tokens)}"
            )
        counts = list(max_new_tokens)
    else:
        counts = [max_new_tokens] * len(prompts)
    for count in counts:
        check_int("max_new_tokens", count)
    if model.positions == "learned":
        for index, (prompt, count) in enumerate(zip(prompts, counts, strict=True)):
            if len(prompt) + count - 1 > model.max_len:
                raise ValueError(
                    f"max_new_tokens: prompt {index} ({len(prompt)} tokens) and {count} new "
                    f"tokens need {len(prompt) + count - 1} positions, more than max_len = "
                    f"{model.max_len}"
                )
    return counts


class ServingEngine:
    """Greedy decoding of many requests at once over one :class:`attnbook.PagedKVCache`.

    ``n_blocks`` defaults to enough for ``max_batch`` of the longest request. ``run(prompts,
    max_new_tokens)`` returns each request's new tokens; afterwards ``cache`` holds no sequence
    and ``stats`` says what happened.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        block_size: int = 16,
        n_blocks: int | None = None,
        max_batch: int = 8,
        share_prefixes: bool = True,
        static: bool = False,
    ) -> None:
        check_pageable(model)
        check_int("block_size", block_size)
        check_int("max_batch", max_batch)
        if n_blocks is not None:
            check_int("n_blocks", n_blocks)
        check_bool("share_prefixes", share_prefixes)
        check_bool("static", static)
        self.model = model
        self.block_size = block_size
        self.n_blocks = n_blocks
        self.max_batch = max_batch
        self.share_prefixes = share_prefixes
        self.static = static
        self.cache: PagedKVCache | None = None
        self.prefixes = PrefixTable()
        self.stats = ServeStats()

    def _new_cache(self, longest: int) -> PagedKVCache:
        per_request = math.ceil(longest / self.block_size)
        n_blocks = self.max_batch * per_request if self.n_blocks is None else self.n_blocks
        if n_blocks < per_request:
            raise ValueError(
                f"n_blocks: the longest request needs {per_request} blocks of "
                f"{self.block_size} positions, got n_blocks = {n_blocks}"
            )
        attention = self.model.blocks[0].attention
        parameter = self.model.lm_head.weight
        return PagedKVCache(
            n_blocks,
            self.block_size,
            len(self.model.blocks),
            attention.n_kv_heads,
            attention.head_dim,
            dtype=parameter.dtype,
            device=parameter.device,
        )

    @torch.no_grad()
    def run(self, prompts: list[list[int]], max_new_tokens: int | list[int]) -> list[list[int]]:
        counts = check_requests(self.model, prompts, max_new_tokens)
        longest = max(len(p) + c - 1 for p, c in zip(prompts, counts, strict=True))
        if self.static:  # a static row runs as long as the longest request of its batch
            longest = max(len(p) for p in prompts) + max(counts) - 1
            if longest > self.model.max_len:
                raise ValueError(
                    f"max_new_tokens: static batching runs every row to the longest prompt "
                    f"plus the largest count, {longest} positions, got a model of max_len = "
                    f"{self.model.max_len}; expected requests that fit together"
                )
        self.cache, self.prefixes, self.stats = (
            self._new_cache(longest),
            PrefixTable(),
            ServeStats(),
        )
        waiting = deque(
            Request(index, list(p), len(p), count)
            for index, (p, count) in enumerate(zip(prompts, counts, strict=True))
        )
        running: list[Request] = []
        outputs: list[list[int]] = [[] for _ in prompts]
        while waiting or running:
            self._admit(waiting, running)
            self._decode(waiting, running)
            self._retire(running, outputs)
        return outputs

    def _admit(self, waiting: deque, running: list) -> None:
        if self.static and running:
            return
        while waiting and len(running) < self.max_batch:
            if self.static and not self._static_fits(running + [waiting[0]]):
                break
            try:
                self._prefill(waiting[0])
            except CacheFullError:
                break
            running.append(waiting.popleft())

    def _static_fits(self, batch: list[Request]) -> bool:
        """Whether every row of a static batch can run to the batch's longest request."""
        steps = max(request.max_new for request in batch)
        needed = sum(math.ceil((r.n_prompt + steps - 1) / self.block_size) for r in batch)
        return needed <= self.cache.n_blocks

    def _prefill(self, request: Request) -> None:
        """Compute a request's tokens (reusing shared prefix blocks) and choose its next token."""
        cache, size, tokens = self.cache, self.block_size, request.tokens
        # the last token is always computed: its logits choose the next token
        hashes = block_hashes(tokens[:-1], size) if self.share_prefixes else []
        shared = self.prefixes.longest_prefix(hashes)
        cache.add_sequence(request.seq_id, shared)
        start = len(shared) * size
        try:
            cache.reserve(request.seq_id, len(tokens) - start)
        except CacheFullError:
            self.prefixes.forget(cache.free(request.seq_id))
            raise
        positions = torch.arange(start, len(tokens), device=cache.keys.device)  # (T,)
        new = torch.tensor(tokens[start:], device=cache.keys.device)  # (T,)
        logits = paged_forward(self.model, new[None], positions[None], cache, [request.seq_id])
        if self.share_prefixes:
            self.prefixes.register(block_hashes(tokens, size), cache.block_tables[request.seq_id])
        request.n_cached = len(tokens)
        tokens.append(int(logits[0, -1].argmax()))
        request.pending_step = None  # this token came from the prefill
        self.stats.prefill_tokens += len(tokens) - 1 - start
        self.stats.shared_tokens += start
        self._note_blocks()

    def _preempt(self, request: Request, waiting: deque, running: list) -> None:
        """Free a running request's blocks and queue it first; it is recomputed later."""
        running.remove(request)
        self.prefixes.forget(self.cache.free(request.seq_id))
        request.n_cached = 0
        request.tokens.pop()  # its pending token is chosen again by the next prefill
        if request.pending_step is not None:  # that decode step's work is lost
            self.stats.schedule[request.pending_step][request.seq_id] = False
        waiting.appendleft(request)
        self.stats.preemptions += 1

    def _decode(self, waiting: deque, running: list) -> None:
        """One batched forward pass: every running sequence gets one more token."""
        for request in list(running):
            while request in running and (self.static or not request.done):
                try:
                    self.cache.reserve(request.seq_id, 1)
                    break
                except CacheFullError:
                    self._preempt(running[-1], waiting, running)
        rows = [r for r in running if self.static or not r.done]  # a static batch pads
        if not rows:
            return
        device = self.cache.keys.device
        last = torch.tensor([[r.tokens[-1]] for r in rows], device=device)  # (B, 1)
        positions = torch.tensor([[r.n_cached] for r in rows], device=device)  # (B, 1)
        ids = [r.seq_id for r in rows]
        logits = paged_forward(self.model, last, positions, self.cache, ids)  # (B, 1, V)
        self.stats.schedule.append({r.seq_id: not r.done for r in rows})
        for request, token in zip(rows, logits[:, -1].argmax(-1).tolist(), strict=True):
            request.n_cached += 1
            request.tokens.append(token)
            request.pending_step = len(self.stats.schedule) - 1
        self.stats.steps += 1
        self.stats.batch_sizes.append(len(rows))
        self._note_blocks()

    def _retire(self, running: list, outputs: list) -> None:
        """Free the finished sequences (in a static batch, only once every row is done)."""
        if self.static and not all(r.done for r in running):
            return
        for request in [r for r in running if r.done]:
            running.remove(request)
            start = request.n_prompt
            outputs[request.seq_id] = request.tokens[start : start + request.max_new]
            self.prefixes.forget(self.cache.free(request.seq_id))

    def _note_blocks(self) -> None:
        self.stats.peak_used_blocks = max(self.stats.peak_used_blocks, self.cache.n_used_blocks)


def serve(
    model: nn.Module,
    prompts: list[list[int]],
    max_new_tokens: int | list[int],
    *,
    block_size: int = 16,
    n_blocks: int | None = None,
    max_batch: int = 8,
    share_prefixes: bool = True,
) -> list[list[int]]:
    """Greedy continuous batching of ``prompts`` (lists of token ids): the new tokens of each.

    ``max_new_tokens``: one count for every prompt, or one per prompt. The result equals
    decoding each prompt alone with :func:`attnbook.greedy_generate`. See
    :class:`ServingEngine` for the scheduler and its statistics.
    """
    engine = ServingEngine(
        model,
        block_size=block_size,
        n_blocks=n_blocks,
        max_batch=max_batch,
        share_prefixes=share_prefixes,
    )
    return engine.run(prompts, max_new_tokens)
