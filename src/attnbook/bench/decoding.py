"""Greedy decoding with a KV cache against recomputing every position, on a tiny model.

:func:`decode_benchmark` times :func:`attnbook.models.decoder.greedy_generate` both ways for
multi-head,
grouped-query and multi-query versions of one :class:`attnbook.models.decoder.TinyDecoder`, on one
CPU thread, and returns one :class:`DecodeResult` per version; :func:`format_results` prints
them as a table; :func:`run` does both. The target, stated in the output and not asserted
anywhere: with the cache, at least :data:`TARGET_SPEEDUP` times faster for 256 new tokens.
"""

import statistics
import time
from dataclasses import dataclass

import torch

from attnbook.core.device import set_seed
from attnbook.models.decoder import TinyDecoder, greedy_generate

TARGET_SPEEDUP = 5.0
N_NEW_TOKENS = 256
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
    n_new: int = N_NEW_TOKENS,
    repeats: int = 5,
    kv_heads: dict[str, int] | None = None,
    n_threads: int = 1,
) -> list[DecodeResult]:
    """Time greedy decoding with and without a KV cache; one result per attention variant.

    Each variant is a seeded, untrained :class:`TinyDecoder` of :data:`MODEL_SIZES` with the
    given number of key/value heads (default :data:`KV_HEAD_CHOICES`). PyTorch runs on
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
                max_len=PROMPT_LEN + n_new,
            ).eval()
            prompt = torch.randint(0, sizes["vocab_size"], (1, PROMPT_LEN))  # (B, T0)
            for use_cache in (True, False):  # warm-up: a few tokens each way
                greedy_generate(model, prompt, PROMPT_LEN, use_cache=use_cache)
            cached_s, cached_tokens = timed_generation(model, prompt, n_new, True, repeats)
            recomputed_s, recomputed_tokens = timed_generation(model, prompt, n_new, False, repeats)
            same_tokens = torch.equal(cached_tokens, recomputed_tokens)
            results.append(
                DecodeResult(variant, n_kv_heads, n_new, cached_s, recomputed_s, same_tokens)
            )
    finally:
        torch.set_num_threads(previous_threads)
    return results


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
    met = all(r.speedup >= TARGET_SPEEDUP and r.n_new >= N_NEW_TOKENS for r in results)
    lines.append(
        f"target: cached decoding at least {TARGET_SPEEDUP:g}x faster for {N_NEW_TOKENS} "
        f"tokens: {'met' if met else 'NOT met'}"
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
