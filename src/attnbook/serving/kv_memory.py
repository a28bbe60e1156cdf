"""How much of a KV cache holds tokens: contiguous preallocation against paging, simulated.

Before paging, a serving system reserved one contiguous chunk per request when it was admitted:
room for the longest sequence it might reach (``"max"``), or, with an oracle that knew each
output's length, for exactly that sequence (``"oracle"``). Paging allocates ``block_size``
positions at a time as a sequence grows. :func:`kv_utilisation` replays one workload of
(prompt length, output length) requests through a pool of ``capacity`` token slots under each
policy, with continuous batching, and reports the fraction of *allocated* slots that hold a
token, averaged over the steps: what Kwon et al. (2023, Fig. 2) measured for Orca and vLLM.
"""

import math
from dataclasses import dataclass

import torch

from attnbook.core._checks import check_choice, check_int

POLICIES = ("max", "oracle", "paged")


@dataclass(frozen=True)
class MemoryReport:
    """Mean fraction of allocated slots holding tokens, steps taken, and mean batch size."""

    policy: str
    utilisation: float
    steps: int
    mean_batch: float


def random_workload(
    n_requests: int, max_prompt: int, max_output: int, *, seed: int = 0
) -> list[tuple[int, int]]:
    """``n_requests`` (prompt length, output length) pairs, uniform in [1, max_*], seeded."""
    for name, value in (
        ("n_requests", n_requests),
        ("max_prompt", max_prompt),
        ("max_output", max_output),
    ):
        check_int(name, value)
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(1, max_prompt + 1, (n_requests,), generator=generator)
    outputs = torch.randint(1, max_output + 1, (n_requests,), generator=generator)
    return list(zip(prompts.tolist(), outputs.tolist(), strict=True))


def _reserved(policy: str, prompt: int, output: int, length: int, max_len: int, size: int) -> int:
    """Slots a request holds under ``policy`` once ``length`` of its tokens are cached."""
    if policy == "max":
        return max_len
    if policy == "oracle":
        return prompt + output
    return size * math.ceil(length / size)


def kv_utilisation(
    workload: list[tuple[int, int]],
    policy: str,
    *,
    capacity: int,
    max_len: int,
    block_size: int = 16,
) -> MemoryReport:
    """Replay ``workload`` with continuous batching; the mean share of allocated slots in use.

    A request is admitted (first come, first served) when its *initial* allocation fits in
    the free slots: ``max_len`` slots (``"max"``), prompt + output (``"oracle"``), or the
    blocks of its prompt (``"paged"``, and only while a block stays free for each running
    request). Each step every running request caches one more token;
    a finished one frees its slots. Paged requests grow a block at a time; one that cannot grow
    waits a step. Every request must fit alone: prompt + output <= max_len <= capacity.
    """
    check_choice("policy", policy, POLICIES)
    check_int("capacity", capacity)
    check_int("max_len", max_len, high=capacity)
    check_int("block_size", block_size)
    for prompt, output in workload:
        if prompt + output > max_len:
            raise ValueError(
                f"workload: a request of {prompt} + {output} exceeds max_len {max_len}"
            )
    waiting, running = list(workload), []  # running: [prompt, output, cached length]
    shares, batch_sizes = [], []
    while waiting or running:
        used = sum(_reserved(policy, *r, max_len, block_size) for r in running)
        while waiting:
            prompt, output = waiting[0]
            need = _reserved(policy, prompt, output, prompt, max_len, block_size)
            # paged: keep a block free for every running request, so admission never stalls them
            headroom = block_size * len(running) if policy == "paged" else 0
            if used + need + headroom > capacity:
                break
            running.append([prompt, output, prompt])
            used += need
            waiting.pop(0)
        grew = 0
        for request in running:
            grown = _reserved(policy, request[0], request[1], request[2] + 1, max_len, block_size)
            held = _reserved(policy, *request, max_len, block_size)
            if grown - held <= capacity - used:
                used += grown - held
                request[2] += 1
                grew += 1
        if not grew:  # every request is stuck: preempt the youngest, which starts over later
            prompt, output, _ = running.pop()
            waiting.insert(0, (prompt, output))
            used = sum(_reserved(policy, *r, max_len, block_size) for r in running)
        tokens = sum(r[2] for r in running)
        shares.append(tokens / used)
        batch_sizes.append(len(running))
        running = [r for r in running if r[2] < r[0] + r[1]]
    steps = len(shares)
    return MemoryReport(policy, sum(shares) / steps, steps, sum(batch_sizes) / steps)
