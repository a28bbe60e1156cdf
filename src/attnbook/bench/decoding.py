"""Greedy decoding with a KV cache against recomputing every position, on a tiny model.

:func:`decode_benchmark` times :func:`attnbook.models.decoder.greedy_generate` both ways for
multi-head,
grouped-query and multi-query versions of one :class:`attnbook.models.decoder.TinyDecoder`, on one
CPU thread, and returns one :class:`DecodeResult` per version; :func:`format_results` prints
them as a table; :func:`run` does both.

The target, stated in the output and not asserted anywhere, is what a cache claims: its cost
per token does not grow with the length, while recomputation's does (each step reruns the
whole prefix: quadratic work in all). So the speed-up must grow with the number of tokens:
at :data:`N_NEW_TOKENS` new tokens at least :data:`TARGET_GROWTH` times the speed-up at
:data:`SHORT_NEW_TOKENS`. A ratio of two speed-ups measured on the same machine says the same
on any CPU, where one speed-up at one length (say 5x at 256 tokens) depends on how fast the
machine's matrix products are against its per-operation overhead.
"""

import statistics
import time
from dataclasses import dataclass

import torch

from attnbook.core.device import set_seed
from attnbook.models.decoder import TinyDecoder, greedy_generate

N_NEW_TOKENS = 256
SHORT_NEW_TOKENS = 64
# Recomputation's steps average 8 + 32 positions for 64 tokens and 8 + 128 for 256: 3.4 times
# the work per token, while the cache's steps stay one position each. Were recomputation's cost
# per token flat (only overhead), the speed-up at 256 tokens over the one at 64 would be about 1.
TARGET_GROWTH = 1.5
PROMPT_LEN = 8
MODEL_SIZES = {"vocab_size": 256, "d_model": 192, "n_heads": 8, "n_layers": 2}
KV_HEAD_CHOICES = {"MHA": 8, "GQA": 2, "MQA": 1}


@dataclass(frozen=True)
class DecodeResult:
    """Median seconds to generate ``n_new`` tokens with and without the cache."""

    variant: str
    n_kv_heads: int
    n_new: int
    cached_s: float
    recomputed_s: float
    same_tokens: bool

    @property
    def speedup(self) -> float:
        return self.recomputed_s / self.cached_s


def timed_generation(
    model: TinyDecoder, prompt: torch.Tensor, n_new: int, use_cache: bool, repeats: int
) -> tuple[float, torch.Tensor]:
    """The median wall-clock time of ``repeats`` greedy generations, and the tokens generated."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens, _ = greedy_generate(model, prompt, n_new, use_cache=use_cache)
        times.append(time.perf_counter() - start)
    return statistics.median(times), tokens


def decode_benchmark(
    *,
    lengths: tuple[int, ...] = (SHORT_NEW_TOKENS, N_NEW_TOKENS),
    repeats: int = 5,
    kv_heads: dict[str, int] | None = None,
    n_threads: int = 1,
) -> list[DecodeResult]:
    """Time greedy decoding with and without a KV cache; one result per variant and length.

    Each variant is a seeded, untrained :class:`TinyDecoder` of :data:`MODEL_SIZES` with the
    given number of key/value heads (default :data:`KV_HEAD_CHOICES`), generating each of
    ``lengths`` new tokens after an 8-token prompt. PyTorch runs on
    ``n_threads`` threads (restored afterwards), every timing is the median of ``repeats``
    runs after a short warm-up, and ``same_tokens`` says whether both ways chose the same tokens.
    """
    kv_heads = KV_HEAD_CHOICES if kv_heads is None else kv_heads
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    results = []
    try:
        for variant, n_kv_heads in kv_heads.items():
            set_seed(0)
            sizes = MODEL_SIZES
            model = TinyDecoder(
                sizes["vocab_size"],
                d_model=sizes["d_model"],
                n_heads=sizes["n_heads"],
                n_kv_heads=n_kv_heads,
                n_layers=sizes["n_layers"],
                max_len=PROMPT_LEN + max(lengths),
            ).eval()
            prompt = torch.randint(0, sizes["vocab_size"], (1, PROMPT_LEN))  # (B, T0)
            for use_cache in (True, False):  # warm-up: a few tokens each way
                greedy_generate(model, prompt, PROMPT_LEN, use_cache=use_cache)
            for n_new in lengths:
                cached_s, cached = timed_generation(model, prompt, n_new, True, repeats)
                recomputed_s, recomputed = timed_generation(model, prompt, n_new, False, repeats)
                same_tokens = torch.equal(cached, recomputed)
                results.append(
                    DecodeResult(variant, n_kv_heads, n_new, cached_s, recomputed_s, same_tokens)
                )
    finally:
        torch.set_num_threads(previous_threads)
    return results


def growth_verdict(results: list[DecodeResult]) -> tuple[dict[str, float], bool | None]:
    """Per variant, the speed-up at :data:`N_NEW_TOKENS` over the one at
    :data:`SHORT_NEW_TOKENS`, and whether every variant reaches :data:`TARGET_GROWTH` (None
    when some variant lacks either length: not measured)."""
    speedups = {(r.variant, r.n_new): r.speedup for r in results}
    variants = list(dict.fromkeys(r.variant for r in results))
    lengths = (N_NEW_TOKENS, SHORT_NEW_TOKENS)
    if not variants or any((v, n) not in speedups for v in variants for n in lengths):
        return {}, None
    growth = {v: speedups[v, N_NEW_TOKENS] / speedups[v, SHORT_NEW_TOKENS] for v in variants}
    return growth, all(g >= TARGET_GROWTH for g in growth.values())


def format_results(results: list[DecodeResult]) -> str:
    """The results as a text table, with the target and whether every variant meets it."""
    sizes = ", ".join(f"{name} {value}" for name, value in MODEL_SIZES.items())
    lines = [
        f"KV-cache decoding vs recomputation: greedy, batch 1, {PROMPT_LEN}-token prompt, "
        f"one CPU thread, median of repeats; TinyDecoder({sizes})",
        f"{'variant':8} {'H_kv':>4} {'tokens':>6} {'cached tok/s':>13} "
        f"{'recomputed tok/s':>17} {'speedup':>8} {'same tokens':>12}",
    ]
    for r in results:
        lines.append(
            f"{r.variant:8} {r.n_kv_heads:4d} {r.n_new:6d} {r.n_new / r.cached_s:13.0f} "
            f"{r.n_new / r.recomputed_s:17.0f} {r.speedup:7.1f}x {str(r.same_tokens):>12}"
        )
    growth, met = growth_verdict(results)
    measured = ", ".join(f"{variant} {ratio:.1f}x" for variant, ratio in growth.items())
    verdict = "not measured" if met is None else f"{'met' if met else 'NOT met'} ({measured})"
    lines.append(
        f"target: the cache's speed-up grows with length, at {N_NEW_TOKENS} tokens at least "
        f"{TARGET_GROWTH:g}x the speed-up at {SHORT_NEW_TOKENS}: {verdict}"
    )
    return "\n".join(lines)


def run(quick: bool = False) -> str:
    """Run the benchmark and return its table; ``quick`` times only MHA, once (a smoke test)."""
    if quick:
        results = decode_benchmark(repeats=1, kv_heads={"MHA": KV_HEAD_CHOICES["MHA"]})
    else:
        results = decode_benchmark()
    return format_results(results)


if __name__ == "__main__":
    print(run())
