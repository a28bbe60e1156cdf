"""Chapter 11's exercise checkers: absorbed scores, queries against cached latents, keys never
built.
"""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)
from attnbook.layers.latent import MultiHeadLatentAttention

# Chapter 11: absorbed scores, queries against cached latents, keys never built.


@_checker
def check_latent_scores(fn: Callable[[nn.Module, Tensor, Tensor], Tensor]) -> None:
    """``fn(layer, x (B, T, D), latents (B, S, d_c))`` -> scaled scores (B, H, T, S)."""
    layer = MultiHeadLatentAttention(16, 4, 8).eval()  # D = 16, H = 4, d_c = 8
    x = torch.randn(2, 3, 16, generator=_generator(11))  # (B, T, D)
    context = torch.randn(2, 5, 16, generator=_generator(12))  # (B, S, D)
    with torch.no_grad():
        latents = layer.kv_down(context)  # (B, S, d_c)
        q = layer.q_proj(x).unflatten(-1, (4, 4)).transpose(1, 2)  # (B, H, T, d_head)
        k = layer.k_up(latents).unflatten(-1, (4, 4)).transpose(1, 2)  # (B, H, S, d_head)
    expected = q @ k.transpose(-2, -1) / 2.0  # (B, H, T, S), 1 / sqrt(d_head = 4)

    def no_keys(module, inputs):
        _fail("latent_scores must not call layer.k_up: fold W_UK into the query instead")

    hook = layer.k_up.register_forward_pre_hook(no_keys)
    call = "latent_scores(layer (D 16, H 4, d_c 8), x (2, 3, 16), latents (2, 5, 8))"
    try:
        with torch.no_grad():
            result = _as_tensor(_call(fn, call, layer, x, latents), call, "a tensor")
    finally:
        hook.remove()
    if tuple(result.shape) != (2, 4, 3, 5):
        _fail(f"{call} should return (B, H, T, S) = (2, 4, 3, 5), got {tuple(result.shape)}")
    if _close(result, expected * 2.0, atol=1e-5):
        _fail(f"{call} forgot the scale 1 / sqrt(d_head)")
    if not _close(result, expected, atol=1e-5):
        _fail(
            f"{call} differs from q . k / sqrt(d_head): map each head's query into the latent "
            "space with W_UK^(h)T (k_up.weight viewed as (H, d_head, d_c)) and take its dot "
            "product with every latent"
        )
    _succeed("the absorbed scores equal the scores of the up-projected keys")
