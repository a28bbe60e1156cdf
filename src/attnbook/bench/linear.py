"""Gated DeltaNet against softmax attention: decoding per token, and a training step.

Two tables, on the threads the suite runs with:

* Decoding: after a prompt of T tokens, the median time per new token of a
  :class:`attnbook.GatedDeltaNet` layer (its fixed state) and of a cached softmax layer
  (:class:`attnbook.GroupedQueryAttention` with a :class:`attnbook.KVCache`), at T = 256 and
  4096. Target: the Gated DeltaNet layer's time at the longer T within
  :data:`TARGET_DECODE_RATIO` times its time at the shorter one (flat in T).
* Training: forward + backward of the chunked gated delta rule (chunk 64) against explicit
  causal attention (which forms the T x T scores) and PyTorch's fused causal
  ``F.scaled_dot_product_attention`` (which does not) over the same q, k, v, at T = 2048
  and 4096. Reported, no target.

``--quick`` uses tiny sizes and one repeat (a smoke test; no verdict).
"""

import statistics
import time

import torch

from attnbook.core.attention import scaled_dot_product_attention
from attnbook.layers.multihead import GroupedQueryAttention
from attnbook.linear.delta_rule import gated_delta_rule
from attnbook.linear.gated_deltanet import GatedDeltaNet

TARGET_DECODE_RATIO = 1.2
D_MODEL, N_HEADS, HEAD_DIM = 256, 4, 64


def _median_seconds(step, repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``step``, after one untimed warm-up call."""
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.no_grad()
def decode_seconds(layer, lengths: tuple[int, ...], steps: int) -> list[float]:
    """Median seconds per token of ``steps`` one-token calls after a prompt of each length.

    The lengths take turns, one call each per round (after one untimed call each), so that a
    busy spell of a shared machine slows them alike and their ratio keeps its meaning.
    """
    kwargs = {} if isinstance(layer, GatedDeltaNet) else {"is_causal": True}
    caches = []
    for length in lengths:
        cache = layer.new_cache()
        layer(torch.randn(1, length, layer.d_model), cache=cache, **kwargs)  # (1, T, D) prompt
        caches.append(cache)
    token = torch.randn(1, 1, layer.d_model)  # (1, 1, D)
    times = [[] for _ in lengths]
    for round_ in range(steps + 1):
        for cache, timed in zip(caches, times, strict=True):
            start = time.perf_counter()
            layer(token, cache=cache, **kwargs)
            if round_ > 0:  # round 0 warms up
                timed.append(time.perf_counter() - start)
    return [statistics.median(timed) for timed in times]


def decode_table(quick: bool) -> str:
    lengths, steps = ((16, 64), 2) if quick else ((256, 4096), 32)
    torch.manual_seed(0)
    linear = GatedDeltaNet(D_MODEL, N_HEADS)
    softmax = GroupedQueryAttention(D_MODEL, N_HEADS, N_HEADS)
    times = {
        name: decode_seconds(layer, lengths, steps)
        for name, layer in (("Gated DeltaNet", linear), ("softmax + KV cache", softmax))
    }
    lines = [f"Decoding one token after T tokens (D = {D_MODEL}, {N_HEADS} heads)"]
    lines.append(f"{'layer':20s}" + "".join(f"{f'T = {n}':>14s}" for n in lengths) + "   ratio")
    for name, (short, long) in times.items():
        lines.append(f"{name:20s}{1e3 * short:11.3f} ms{1e3 * long:11.3f} ms{long / short:8.2f}")
    ratio = times["Gated DeltaNet"][1] / times["Gated DeltaNet"][0]
    if quick:
        lines.append("target: decoding ratio at most 1.2: not measured at this size")
    else:
        verdict = "met" if ratio <= TARGET_DECODE_RATIO else "NOT met"
        lines.append(
            f"target: Gated DeltaNet ratio <= {TARGET_DECODE_RATIO} ({ratio:.2f}): {verdict}"
        )
    return "\n".join(lines)


def training_seconds(length: int, repeats: int) -> tuple[float, float, float]:
    """Forward + backward seconds: chunked gated delta rule, explicit causal attention,
    and PyTorch's fused causal attention."""
    generator = torch.Generator().manual_seed(0)
    shape = (1, N_HEADS, length, HEAD_DIM)
    q, k, v = (torch.randn(shape, generator=generator).requires_grad_() for _ in range(3))
    alpha = torch.full(shape[:3], 0.99)  # (B, H, T)
    beta = torch.full(shape[:3], 0.5)  # (B, H, T)

    def linear_step():
        unit = torch.nn.functional.normalize(k, dim=-1)
        out, _ = gated_delta_rule(q, unit, v, alpha, beta, chunk_size=64)
        out.sum().backward()

    def softmax_step():
        out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()

    def fused_step():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()

    return tuple(_median_seconds(step, repeats) for step in (linear_step, softmax_step, fused_step))


def training_table(quick: bool) -> str:
    lengths, repeats = ((128, 256), 1) if quick else ((2048, 4096), 3)
    lines = [f"Training step, forward + backward ({N_HEADS} heads of {HEAD_DIM})"]
    lines.append(f"{'T':>6s}{'chunked GDN':>16s}{'explicit softmax':>20s}{'fused SDPA':>16s}")
    for length in lengths:
        linear, softmax, fused = training_seconds(length, repeats)
        lines.append(
            f"{length:6d}{1e3 * linear:13.1f} ms{1e3 * softmax:17.1f} ms{1e3 * fused:13.1f} ms"
        )
    lines.append("reported only: no target")
    return "\n".join(lines)


def run(quick: bool) -> str:
    return decode_table(quick) + "\n\n" + training_table(quick)
