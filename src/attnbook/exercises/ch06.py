"""Chapter 6's exercise checkers: sharing key/value heads."""

from collections.abc import Callable

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from attnbook.exercises._common import _as_tensor, _call, _checker, _fail, _generator, _succeed
from attnbook.layers.gqa_conversion import mean_pool_kv_heads
from attnbook.layers.multihead import GroupedQueryAttention, MultiHeadAttention

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
            "as a free view with expand (a new axis of stride 0 right after the head axis, "
            "axis 2), then reshape it, which makes the one copy"
        )
    if not names & _EXPANDING:
        _fail(
            f"{call} never calls expand: add an axis right after the head axis "
            "(x[:, :, :, None] for heads on axis 2), expand it to n_repeats (a view with "
            "stride 0, no copy), then reshape"
        )


@_checker
def check_repeat_kv(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x (B, S, H_kv, d_head), n_repeats)`` -> (B, S, H_kv * n_repeats, d_head).

    The heads sit on axis 2, as they come out of a projection before the transpose to
    (B, H_kv, S, d_head). The copies of each head sit next to each other, and they are made
    with ``expand`` and ``reshape`` only: no ``repeat_interleave``, ``repeat``, ``cat``,
    ``stack`` or indexing by a list of heads.
    """
    named = torch.arange(3.0).view(1, 1, 3, 1).expand(2, 4, 3, 5)  # (B, S, H_kv, d_head)
    random_kv = torch.randn(2, 3, 4, 8, generator=_generator(0))  # (B, S, H_kv, d_head)
    fn_name = getattr(fn, "__name__", "your function")  # the learner's name, in every message
    for name, x in [("heads named 0, 1, 2", named), ("random keys", random_kv)]:
        for n_repeats in (1, 2, 4):
            call = f"{fn_name}(x of shape {tuple(x.shape)}, {n_repeats}) with {name}"
            with _FunctionsUsed() as used:
                result = _call(fn, call, x, n_repeats)
            result = _as_tensor(result, call, "a tensor")
            batch, length, n_kv_heads, head_dim = x.shape
            shape = (batch, length, n_kv_heads * n_repeats, head_dim)
            if tuple(result.shape) != shape:
                along_s = tuple(result.shape) == (batch, length * n_repeats, n_kv_heads, head_dim)
                _fail(
                    f"{call}: expected shape {shape} (B, S, H, d_head), got "
                    f"{tuple(result.shape)}"
                    + (": the copies went along S; the heads are on axis 2 here" if along_s else "")
                )
            expected = x.repeat_interleave(n_repeats, dim=2)  # (B, S, H, d_head)
            if not torch.equal(result, expected):
                _fail(f"{call}: {_order_hint(result, x, n_repeats)}")
            if n_repeats > 1:
                _check_expand_only(used.names, call)
    _succeed(
        "each key/value head is repeated next to itself, by an expand (a free view) and a "
        "reshape (the one copy)"
    )


def _order_hint(result: Tensor, x: Tensor, n_repeats: int) -> str:
    n_kv_heads = x.size(2)
    if torch.equal(result, x.repeat(1, 1, n_repeats, 1)):
        order = [h % n_kv_heads for h in range(n_kv_heads * n_repeats)]
        return (
            f"the heads come out in the order {order}, which tiles them (as .repeat does, "
            "and a new axis before the head axis). Query head h reads key/value head "
            f"h // {n_repeats}, so the copies of one head must sit next to each other: "
            f"{[h // n_repeats for h in range(n_kv_heads * n_repeats)]}"
        )
    expected = x.repeat_interleave(n_repeats, dim=2)  # (B, S, H, d_head)
    bad_head = next(
        h for h in range(result.size(2)) if not torch.equal(result[:, :, h], expected[:, :, h])
    )
    return (
        f"output head {bad_head} should be a copy of key/value head {bad_head // n_repeats}, "
        "and is not"
    )


# Chapter 6, exercise 3: convert by keeping the first key/value head of every group.


def _source_heads(weight: Tensor, source_weight: Tensor, head_dim: int) -> list[int | None]:
    """For each head (block of ``head_dim`` rows) of ``weight``: the source head it equals."""
    found = []
    for new in weight.split(head_dim):
        matches = [
            h for h, old in enumerate(source_weight.split(head_dim)) if torch.equal(new, old)
        ]
        found.append(matches[0] if matches else None)
    return found


def _check_kept_heads(result: GroupedQueryAttention, source, n_kv: int, call: str) -> None:
    group_size, head_dim = source.n_heads // n_kv, source.head_dim
    wanted = [g * group_size for g in range(n_kv)]  # the first head of every group
    for name in ("k_proj", "v_proj"):
        old, new = getattr(source, name), getattr(result, name)
        kept = _source_heads(new.weight, old.weight, head_dim)
        if kept == wanted:
            bias_kept = _source_heads(new.bias[:, None], old.bias[:, None], head_dim)
            if bias_kept != wanted:
                _fail(
                    f"{call}: {name}.weight keeps the right heads {wanted}, but {name}.bias "
                    f"does not: keep each group's first bias block too (biases per head: "
                    f"{bias_kept}, None where it matches no head)"
                )
            continue
        pooled = getattr(mean_pool_kv_heads(source, n_kv), name).weight
        if torch.allclose(new.weight, pooled):
            _fail(
                f"{call}: {name} is the mean of each group, the chapter's conversion. The "
                f"exercise keeps one head per group instead: heads {wanted}"
            )
        hint = ""
        if kept == list(range(n_kv)):
            hint = (
                f" Those are the first {n_kv} heads, not the first of every group: group g is "
                f"heads {group_size} * g to {group_size} * g + {group_size - 1}, so unflatten "
                f"the heads as (H_kv, G), not (G, H_kv)"
            )
        _fail(
            f"{call}: {name} keeps source heads {kept} (None: matches no head), expected the "
            f"first head of every group of {group_size}: {wanted}.{hint}"
        )


@_checker
def check_keep_first_kv_head(fn: Callable[[GroupedQueryAttention, int], GroupedQueryAttention]):
    """``fn(source, n_kv_heads)`` -> a GroupedQueryAttention with ``n_kv_heads`` key/value heads
    whose key and value projections (weights and biases) are those of the first source head of
    every group of ``H / n_kv_heads`` consecutive heads; query and output projections copied;
    ``source`` left unchanged.
    """
    torch.manual_seed(0)  # the checker runs on a fork of the random state
    source = MultiHeadAttention(16, 8).eval()
    original = {name: value.clone() for name, value in source.state_dict().items()}
    x = torch.randn(2, 5, 16, generator=_generator(1))  # (B, T, D)
    fn_name = getattr(fn, "__name__", "your function")
    for n_kv in (1, 2, 4, 8):
        call = f"{fn_name}(MultiHeadAttention(16, 8), {n_kv})"
        result = _call(fn, call, source, n_kv)
        changed = [n for n, v in source.state_dict().items() if not torch.equal(v, original[n])]
        if changed:
            _fail(
                f"{call} changed the layer it was given ({', '.join(changed)}): build a new "
                "layer, e.g. start from mean_pool_kv_heads(source, n_kv_heads), and change that"
            )
        if not isinstance(result, GroupedQueryAttention):
            _fail(f"{call} should return a GroupedQueryAttention, got {type(result).__name__}")
        if result.n_kv_heads != n_kv:
            _fail(f"{call} returned a layer with {result.n_kv_heads} key/value heads")
        for name in ("q_proj", "out_proj"):
            if not torch.equal(getattr(result, name).weight, getattr(source, name).weight):
                _fail(f"{call}: {name} should be copied from the source unchanged")
        _check_kept_heads(result, source, n_kv, call)
        with torch.no_grad():
            output = _as_tensor(result(x)[0], f"{call}(x)", "a tensor")  # (B, T, D)
        if n_kv == 8 and not torch.allclose(output, source(x)[0], atol=1e-6):
            _fail(f"{call}: with groups of one the converted layer must equal the source")
    _succeed(
        "every group's key/value head is its first source head, for H_kv = 1, 2, 4 and 8; "
        "now compare its error with mean-pooling's"
    )
