"""Chapter 12's exercise checkers: KV cache bytes per token of a TinyDecoder of any attention
variant.
"""

from collections.abc import Callable

import torch

from attnbook.exercises._common import _call, _checker, _fail, _generator, _succeed
from attnbook.models.decoder import TinyDecoder

# Chapter 12: KV cache bytes per token of a TinyDecoder of any attention variant.


def _cache_models() -> list[tuple[str, TinyDecoder]]:
    """(description, model) pairs: every variant, float64 once, MLA with and without RoPE.

    The 3-layer model comes first: there, forgetting the values (x 1/2) and forgetting to sum
    the layers (x 1/3) give different wrong answers, so the hint can tell which it was.
    """
    torch.manual_seed(0)
    specs = [  # description, layers, TinyDecoder keywords
        ("3-layer GQA, H = 4, H_kv = 2, d_head = 4, float32", 3, {"n_kv_heads": 2}),
        ("2-layer MHA, H = H_kv = 4, d_head = 4, float32", 2, {"n_kv_heads": 4}),
        ("2-layer MQA, H = 4, H_kv = 1, d_head = 4, float32", 2, {"n_kv_heads": 1}),
        ("2-layer MLA, d_c = 6, no RoPE, float32", 2, {"kv_latent_dim": 6}),
        ("2-layer MLA, d_c = 6, rope_dim = 4, float32", 2, {"kv_latent_dim": 6, "rope_dim": 4}),
    ]
    sizes = {"d_model": 16, "n_heads": 4, "max_len": 12}
    models = [
        (label, TinyDecoder(11, n_layers=layers, **sizes, **keywords).eval())
        for label, layers, keywords in specs
    ]
    gqa64 = TinyDecoder(11, n_layers=3, n_kv_heads=2, **sizes).double().eval()
    return models + [("3-layer GQA, H = 4, H_kv = 2, d_head = 4, float64", gqa64)]


def _cache_hint(model: TinyDecoder, result: int, expected: int) -> str:
    attention = model.blocks[0].attention
    if next(model.parameters()).dtype == torch.float64 and 2 * result == expected:
        return "take the bytes per number from the parameters' dtype (8 for float64), not 4"
    if model.variant == "mla":
        if attention.rope_dim and result * (attention.kv_latent_dim + attention.rope_dim) == (
            expected * attention.kv_latent_dim
        ):
            return "with RoPE, MLA also caches one rotary key of rope_dim numbers per token"
        return "MLA caches one latent of kv_latent_dim (+ rope_dim) numbers per token and layer"
    if result * len(model.blocks) == expected:
        return "every layer keeps its own cache: add them all up"
    if 2 * result == expected:
        return "every key/value head caches a key AND a value per token"
    if result * attention.n_kv_heads == expected * attention.n_heads:
        return "count the key/value heads (n_kv_heads), not the query heads"
    return "per layer: 2 * n_kv_heads * head_dim numbers, or kv_latent_dim + rope_dim for MLA"


@_checker
def check_cache_bytes_per_token(fn: Callable[[TinyDecoder], int]) -> None:
    """``fn(model)`` -> the KV cache bytes one token costs a :class:`TinyDecoder`, any variant."""
    prompt = torch.randint(0, 11, (1, 5), generator=_generator(0))  # (B, T)
    for label, model in _cache_models():
        caches = model.new_caches()
        with torch.no_grad():
            model(prompt, caches)
        expected = sum(cache.nbytes for cache in caches) // prompt.size(1)
        call = f"cache_bytes_per_token(<{label}>)"
        result = _call(fn, call, model)
        if isinstance(result, bool) or not isinstance(result, int):
            _fail(f"{call} should return an int (bytes), got {type(result).__name__}")
        if result != expected:
            _fail(
                f"{call} returned {result}, but its caches hold {expected} bytes per token: "
                f"{_cache_hint(model, result, expected)}"
            )
    _succeed("your formula gives the bytes the caches hold, for every variant and dtype")
