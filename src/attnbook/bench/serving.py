"""Serving: KV memory that holds tokens, and continuous against static batching.

Two rows, each with its target and a verdict. :func:`memory_rows` replays one seeded workload
of random prompt and output lengths through :func:`attnbook.kv_utilisation` under contiguous
preallocation (to the maximum length, and to each request's exact length) and under paging;
target: paging keeps at least :data:`TARGET_UTILISATION` of its allocated slots holding tokens.
:func:`batching_row` times :class:`attnbook.ServingEngine` on the same requests with continuous
and with static batching (a seeded, untrained TinyDecoder on the CPU), checks both give the
same tokens, and compares tokens per second; target: at least :data:`TARGET_SPEEDUP` times.
"""

import time

import torch

from attnbook.core.device import set_seed
from attnbook.models.decoder import TinyDecoder
from attnbook.serving.batching import ServingEngine
from attnbook.serving.kv_memory import POLICIES, kv_utilisation, random_workload

TARGET_UTILISATION = 0.95
TARGET_SPEEDUP = 1.5
MEMORY = {"n_requests": 300, "max_prompt": 128, "max_output": 384, "capacity": 16384}
MEMORY_QUICK = {"n_requests": 40, "max_prompt": 32, "max_output": 96, "capacity": 2048}
BATCHING = {"n_requests": 48, "max_prompt": 16, "max_output": 48, "max_batch": 8}
BATCHING_QUICK = {"n_requests": 8, "max_prompt": 8, "max_output": 8, "max_batch": 4}
MODEL = {"vocab_size": 64, "d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 64}


def memory_rows(quick: bool = False) -> dict[str, float]:
    """Mean share of allocated KV slots holding tokens, per policy (block size 16)."""
    sizes = MEMORY_QUICK if quick else MEMORY
    workload = random_workload(
        sizes["n_requests"], sizes["max_prompt"], sizes["max_output"], seed=0
    )
    max_len = sizes["max_prompt"] + sizes["max_output"]
    return {
        policy: kv_utilisation(
            workload, policy, capacity=sizes["capacity"], max_len=max_len
        ).utilisation
        for policy in POLICIES
    }


def batching_row(quick: bool = False) -> tuple[float, float, bool]:
    """Tokens per second with continuous and with static batching, and whether they agree."""
    sizes = BATCHING_QUICK if quick else BATCHING
    set_seed(0)
    model = TinyDecoder(
        MODEL["vocab_size"], **{k: v for k, v in MODEL.items() if k != "vocab_size"}
    )
    model.eval()
    lengths = random_workload(sizes["n_requests"], sizes["max_prompt"], sizes["max_output"])
    prompts = [torch.randint(0, MODEL["vocab_size"], (p,)).tolist() for p, _ in lengths]
    counts = [n for _, n in lengths]
    rates, outputs = [], []
    for static in (False, True):
        engine = ServingEngine(model, block_size=16, max_batch=sizes["max_batch"], static=static)
        start = time.perf_counter()
        outputs.append(engine.run(prompts, counts))
        rates.append(sum(counts) / (time.perf_counter() - start))
    return rates[0], rates[1], outputs[0] == outputs[1]


def run(quick: bool = False) -> str:
    """Both rows as a text table with targets and verdicts."""
    shares = memory_rows(quick)
    continuous, static, same = batching_row(quick)
    sizes = MEMORY_QUICK if quick else MEMORY
    lines = [
        f"Serving: KV memory holding tokens ({sizes['n_requests']} requests, prompts <= "
        f"{sizes['max_prompt']}, outputs <= {sizes['max_output']}, "
        f"{sizes['capacity']} slots, block 16)",
        "  ".join(f"{policy} {share:.3f}" for policy, share in shares.items()),
    ]
    met = shares["paged"] >= TARGET_UTILISATION
    lines.append(
        f"target: paged utilisation at least {TARGET_UTILISATION}: "
        + ("not measured at this size" if quick else ("met" if met else "NOT met"))
    )
    lines += [
        "Serving: continuous vs static batching (same requests, tokens/s on the CPU)",
        f"continuous {continuous:.0f}  static {static:.0f}  speedup {continuous / static:.2f}x  "
        f"same tokens {same}",
    ]
    met = continuous / static >= TARGET_SPEEDUP and same
    lines.append(
        f"target: continuous at least {TARGET_SPEEDUP}x static: "
        + ("not measured at this size" if quick else ("met" if met else "NOT met"))
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
