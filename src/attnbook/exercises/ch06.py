"""Chapter 6's exercise checkers: sharing key/value heads."""

from collections.abc import Callable

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from attnbook.exercises._common import _as_tensor, _call, _checker, _fail, _generator, _succeed

# Chapter 6: sharing key/value heads, with `expand` and `reshape` only.

# Functions that copy every head n_repeats times themselves: the exercise builds the copies as
# a stride-0 view (`expand`) that one `reshape` then copies.
_COPYING = {
    "repeat_interleave",
    "repeat",
    "tile",
    "cat",
    "concat",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "index_select",
    "gather",
    "take_along_dim",
}
_EXPANDING = {"expand", "expand_as", "broadcast_to"}


class _FunctionsUsed(TorchFunctionMode):
    """Records the names of the torch functions and tensor methods called under it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name == "__getitem__" and _indexes_with_a_list(args[1]):
            name = "indexing with a list of heads"
        self.names.add(name)
        return func(*args, **(kwargs or {}))


def _indexes_with_a_list(index: object) -> bool:
    """Whether an index picks entries by a tensor or list (advanced indexing, which copies)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(torch.is_tensor(part) or isinstance(part, list) for part in parts)


def _check_expand_only(names: set[str], call: str) -> None:
    copying = sorted(names & _COPYING | {n for n in names if n.startswith("indexing")})
    if copying:
        _fail(
            f"{call} uses {', '.join(copying)}, which the exercise leaves out: build the copies "
            "as a free view with expand (a new axis of stride 0 after the head axis), then "
            "reshape it, which makes the one copy"
        )
    if not names & _EXPANDING:
        _fail(
            f"{call} never calls expand: add an axis after the head axis (x[:, :, None]), "
            "expand it to n_repeats (a view with stride 0, no copy), then reshape"
        )


@_checker
def check_repeat_kv(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x (B, H_kv, S, d_head), n_repeats)`` -> (B, H_kv * n_repeats, S, d_head).

    The copies of each head sit next to each other, and they are made with ``expand`` and
    ``reshape`` only: no ``repeat_interleave``, ``repeat``, ``cat``, ``stack`` or indexing
    by a list of heads.
    """
    named = torch.arange(3.0).view(1, 3, 1, 1).expand(2, 3, 4, 5)  # (B, H_kv, S, d_head)
    random_kv = torch.randn(2, 4, 3, 8, generator=_generator(0))  # (B, H_kv, S, d_head)
    fn_name = getattr(fn, "__name__", "your function")  # the learner's name, in every message
    for name, x in [("heads named 0, 1, 2", named), ("random keys", random_kv)]:
        for n_repeats in (1, 2, 4):
            call = f"{fn_name}(x of shape {tuple(x.shape)}, {n_repeats}) with {name}"
            with _FunctionsUsed() as used:
                result = _call(fn, call, x, n_repeats)
            result = _as_tensor(result, call, "a tensor")
            batch, n_kv_heads, length, head_dim = x.shape
            shape = (batch, n_kv_heads * n_repeats, length, head_dim)
            if tuple(result.shape) != shape:
                _fail(
                    f"{call}: expected shape {shape} (B, H, S, d_head), got {tuple(result.shape)}"
                )
            expected = x.repeat_interleave(n_repeats, dim=1)  # (B, H, S, d_head)
            if not torch.equal(result, expected):
                _fail(f"{call}: {_order_hint(result, x, n_repeats)}")
            if n_repeats > 1:
                _check_expand_only(used.names, call)
    _succeed(
        "each key/value head is repeated next to itself, by an expand (a free view) and a "
        "reshape (the one copy)"
    )


def _order_hint(result: Tensor, x: Tensor, n_repeats: int) -> str:
    n_kv_heads = x.size(1)
    if torch.equal(result, x.repeat(1, n_repeats, 1, 1)):
        order = [h % n_kv_heads for h in range(n_kv_heads * n_repeats)]
        return (
            f"the heads come out in the order {order}, which tiles them. Query head h reads "
            f"key/value head h // {n_repeats}, so the copies of one head must sit next to each "
            f"other: {[h // n_repeats for h in range(n_kv_heads * n_repeats)]}"
        )
    expected = x.repeat_interleave(n_repeats, dim=1)  # (B, H, S, d_head)
    bad_head = next(
        h for h in range(result.size(1)) if not torch.equal(result[:, h], expected[:, h])
    )
    return (
        f"output head {bad_head} should be a copy of key/value head {bad_head // n_repeats}, "
        "and is not"
    )
