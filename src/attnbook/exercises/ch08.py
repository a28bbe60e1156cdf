"""Chapter 8's exercise checkers: a KV cache that writes into preallocated buffers."""

from collections.abc import Callable

import torch
from torch import Tensor

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


def _append(cache: KVCache, call: str, keys: Tensor) -> tuple[Tensor, Tensor]:
    returned = _call(cache.append, call, keys, keys + 100.0)  # values differ from the keys
    if not isinstance(returned, tuple) or len(returned) != 2:
        _fail(f"{call} should return (keys, values), got {type(returned).__name__}")
    keys = _as_tensor(returned[0], call, "the cached keys as a tensor")
    values = _as_tensor(returned[1], call, "the cached values as a tensor")
    return keys, values


def _check_appends_in_place(cache_class: Callable[[int], KVCache], name: str) -> None:
    """Three appends to one cache must return views of one key buffer and one value buffer,
    whatever the buffers are called."""
    cache = _call(cache_class, f"{name}(12)", 12)
    chunks = torch.randn(3, 2, 2, 3, 4, generator=_generator(1))  # (chunk, B, H_kv, S, d_head)
    first = None
    for index, chunk in enumerate(chunks):
        call = f"{name}(12).append(keys, values) (call {index + 1})"
        keys, values = _append(cache, call, chunk)
        storages = [t.untyped_storage().data_ptr() for t in (keys, values)]
        first = first or storages
        for part, storage, first_storage in zip(("keys", "values"), storages, first, strict=True):
            if storage != first_storage:
                _fail(
                    f"{call} returned {part} in new memory: write the new {part} into the "
                    f"buffer allocated on the first call and return a view of its filled part, "
                    f"for the {part} as well as the "
                    f"{'values' if part == 'keys' else 'keys'} (a copy, torch.cat or .clone() "
                    f"copies the whole cache at every step)"
                )


def _check_refuses_overflow(cache_class: Callable[[int], KVCache], name: str) -> None:
    """Positions past max_len must raise, whether they come one by one or in one chunk."""
    for chunk_length, what in [(1, "one token at a time"), (2, "two tokens at a time")]:
        cache = _call(cache_class, f"{name}(3)", 3)
        tokens = torch.randn(4, 1, 1, 1, 2, generator=_generator(2))  # (step, B, H_kv, 1, d)
        steps = tokens.split(chunk_length)  # chunks of (chunk, B, H_kv, 1, d)
        filled = 0
        for step in steps:
            keys = torch.cat(list(step), dim=2)  # (B, H_kv, chunk, d_head)
            call = f"{name}(3).append(...) of {keys.size(2)} more after {filled} positions"
            if filled + keys.size(2) <= 3:
                _append(cache, call, keys)
                filled += keys.size(2)
                continue
            try:
                cache.append(keys, keys + 100.0)
            except NotImplementedError:
                raise
            except Exception:
                break
            _fail(
                f"{call} did not raise ({what}): {filled + keys.size(2)} positions do not fit "
                f"in max_len = 3. Check before writing; a slice past the end of the buffer is "
                f"silently empty, so the token would be lost"
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
    _check_refuses_overflow(cache_class, name)
    _succeed(
        "decoding with your cache matches KVCache, append writes keys and values in place, "
        "and positions past max_len raise"
    )
