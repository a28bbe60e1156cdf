"""Chapter 11's exercise checkers: absorbed scores, queries against cached latents, keys never
built.
"""

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

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

# Sizes chosen so that a key-sized tensor is recognisable by its shape alone: S = 7 divides
# no other size, and d_head = 6 (H * d_head = 24) is no other size.
_B, _T, _S, _H, _D_HEAD, _D_C = 2, 3, 7, 4, 6, 5


class _NoKeySizedTensors(TorchFunctionMode):
    """Refuses any torch result holding keys: a width d_head or H * d_head, S positions."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in result if isinstance(result, tuple | list) else (result,):
            if torch.is_tensor(tensor) and _key_sized(tensor):
                name = getattr(func, "__name__", "a torch function")
                _fail(
                    f"latent_scores built a tensor of shape {tuple(tensor.shape)} with {name}: "
                    f"that is keys, {_D_HEAD} features (d_head) for each of the {_S} cached "
                    f"positions. The point of absorption is never to build them: move each "
                    f"head's query into the latent space instead, q^(h) W_UK^(h) (shape "
                    f"(B, H, T, d_c)), and take its dot product with the latents as they are"
                )
        return result


def _key_sized(tensor: Tensor) -> bool:
    widths = {_D_HEAD, _H * _D_HEAD}
    return tensor.numel() % _S == 0 and any(size in widths for size in tensor.shape)


@_checker
def check_latent_scores(fn: Callable[[nn.Module, Tensor, Tensor], Tensor]) -> None:
    """``fn(layer, x (B, T, D), latents (B, S, d_c))`` -> scaled scores (B, H, T, S).

    Without building the keys: no call of ``layer.k_up``, and no tensor of keys' shape (a
    width d_head or H * d_head for each of the S positions) made on the way.
    """
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(_H * _D_HEAD, _H, _D_C).eval()
    x = torch.randn(_B, _T, _H * _D_HEAD, generator=_generator(11))  # (B, T, D)
    context = torch.randn(_B, _S, _H * _D_HEAD, generator=_generator(12))  # (B, S, D)
    with torch.no_grad():
        latents = layer.kv_down(context)  # (B, S, d_c)
        q = layer.q_proj(x).unflatten(-1, (_H, _D_HEAD)).transpose(1, 2)  # (B, H, T, d_head)
        k = layer.k_up(latents).unflatten(-1, (_H, _D_HEAD)).transpose(1, 2)  # (B, H, S, d_head)
    expected = q @ k.transpose(-2, -1) / math.sqrt(_D_HEAD)  # (B, H, T, S)

    def no_keys(module, inputs):
        _fail("latent_scores must not call layer.k_up: fold W_UK into the query instead")

    hook = layer.k_up.register_forward_pre_hook(no_keys)
    call = (
        f"latent_scores(layer (D {_H * _D_HEAD}, H {_H}, d_c {_D_C}), x ({_B}, {_T}, "
        f"{_H * _D_HEAD}), latents ({_B}, {_S}, {_D_C}))"
    )
    try:
        with torch.no_grad(), _NoKeySizedTensors():
            result = _call(fn, call, layer, x, latents)
    finally:
        hook.remove()
    result = _as_tensor(result, call, "a tensor")
    shape = (_B, _H, _T, _S)
    if tuple(result.shape) != shape:
        _fail(f"{call} should return (B, H, T, S) = {shape}, got {tuple(result.shape)}")
    if _close(result, expected * math.sqrt(_D_HEAD), atol=1e-5):
        _fail(f"{call} forgot the scale 1 / sqrt(d_head)")
    if _close(result, expected * math.sqrt(_D_HEAD / _D_C), atol=1e-5):
        _fail(
            f"{call} scales by 1 / sqrt(d_c): the scores are the explicit form's, q . k over "
            f"d_head features, so the scale stays 1 / sqrt(d_head)"
        )
    if not _close(result, expected, atol=1e-5):
        _fail(
            f"{call} differs from q . k / sqrt(d_head): map each head's query into the latent "
            "space with W_UK^(h)T (k_up.weight viewed as (H, d_head, d_c)) and take its dot "
            "product with every latent"
        )
    _succeed("the absorbed scores equal the scores of the up-projected keys, never built")
