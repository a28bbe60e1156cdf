"""Chapter 8's exercise checkers: a KV cache that writes into preallocated buffers."""

from collections.abc import Callable

import torch

from attnbook.core.kv_cache import KVCache
from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)
from attnbook.models.decoder import TinyDecoder

# Chapter 8: a KV cache that writes into preallocated buffers.


def _small_decoder() -> TinyDecoder:
    torch.manual_seed(0)
    return TinyDecoder(11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, max_len=12).eval()


def _check_appends_in_place(cache_class: Callable[[int], KVCache], name: str) -> None:
    """Two appends to one cache must return views of one buffer, whatever the buffers are called."""
    cache = _call(cache_class, f"{name}(12)", 12)
    chunks = torch.randn(2, 2, 2, 3, 4, generator=_generator(1))  # (chunk, B, H_kv, S, d_head)
    storages = []
    for index, chunk in enumerate(chunks):
        call = f"{name}(12).append(keys, values) (call {index + 1})"
        returned = _call(cache.append, call, chunk, chunk.clone())
        if not isinstance(returned, tuple) or len(returned) != 2:
            _fail(f"{call} should return (keys, values), got {type(returned).__name__}")
        keys = _as_tensor(returned[0], call, "the cached keys as a tensor")
        storages.append(keys.untyped_storage().data_ptr())
    if storages[0] != storages[1]:
        _fail(
            "append allocated new memory for the keys: it should write into the buffer allocated "
            "on the first call and return a view of its filled part"
        )


@_checker
def check_preallocated_kv_cache(cache_class: Callable[[int], KVCache]) -> None:
    """``cache_class(max_len)``: a KVCache whose ``append`` writes into buffers allocated once."""
    model = _small_decoder()
    prompt = torch.randint(0, 11, (2, 4), generator=_generator(0))  # (B, T0)
    name = getattr(cache_class, "__name__", "cache_class")
    caches = [_call(cache_class, f"{name}(12)", 12) for _ in model.blocks]
    plain = model.new_caches()
    chunks = {"the 4-token prompt": prompt, "1 more token": prompt[:, :1], "2 more": prompt[:, 1:3]}
    with torch.no_grad():
        for label, chunk in chunks.items():
            expected = model(chunk, plain)  # (B, T, V)
            got = _call(model, f"decoding {label} with {name}", chunk, caches)  # (B, T, V)
            if not _close(got, expected, atol=1e-5):
                _fail(
                    f"after {label}, the logits differ from those of the plain KVCache: append "
                    f"must return the keys and values of every cached position, oldest first, "
                    f"and len(cache) must count them (the model reads its positions from it)"
                )
    if len(caches[0]) != 7:
        _fail(f"len(cache) should be 7 after caching 4 + 1 + 2 positions, got {len(caches[0])}")
    _check_appends_in_place(cache_class, name)
    _succeed("decoding with your cache matches KVCache, and append writes in place")
