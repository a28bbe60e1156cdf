"""Chapter 6's exercise checkers: sharing key/value heads."""

from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.exercises._common import _as_tensor, _call, _checker, _fail, _generator, _succeed

# Chapter 6: sharing key/value heads.


@_checker
def check_repeat_kv(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x (B, H_kv, S, d_head), n_repeats)`` -> (B, H_kv * n_repeats, S, d_head)."""
    named = torch.arange(3.0).view(1, 3, 1, 1).expand(2, 3, 4, 5)  # (B, H_kv, S, d_head)
    random_kv = torch.randn(2, 4, 3, 8, generator=_generator(0))  # (B, H_kv, S, d_head)
    for name, x in [("heads named 0, 1, 2", named), ("random keys", random_kv)]:
        for n_repeats in (1, 2, 4):
            call = f"repeat_kv(x of shape {tuple(x.shape)}, {n_repeats}) with {name}"
            result = _as_tensor(_call(fn, call, x, n_repeats), call, "a tensor")
            batch, n_kv_heads, length, head_dim = x.shape
            shape = (batch, n_kv_heads * n_repeats, length, head_dim)
            if tuple(result.shape) != shape:
                _fail(
                    f"{call}: expected shape {shape} (B, H, S, d_head), got {tuple(result.shape)}"
                )
            expected = x.repeat_interleave(n_repeats, dim=1)  # (B, H, S, d_head)
            if torch.equal(result, expected):
                continue
            if torch.equal(result, x.repeat(1, n_repeats, 1, 1)):
                order = [h % n_kv_heads for h in range(n_kv_heads * n_repeats)]
                _fail(
                    f"{call}: the heads come out in the order {order}, which tiles them. Query "
                    f"head h reads key/value head h // {n_repeats}, so the copies of one head "
                    f"must sit next to each other: "
                    f"{[h // n_repeats for h in range(n_kv_heads * n_repeats)]}"
                )
            bad_head = next(
                h for h in range(shape[1]) if not torch.equal(result[:, h], expected[:, h])
            )
            _fail(
                f"{call}: output head {bad_head} should be a copy of key/value head "
                f"{bad_head // n_repeats}, and is not"
            )
    _succeed("each key/value head is copied in place, n_repeats times, next to itself")
