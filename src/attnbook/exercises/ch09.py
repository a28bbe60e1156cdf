"""Chapter 9's exercise checkers: the log-sum-exp computed online; the gradients of one block of
queries, from the saved lse.
"""

from collections.abc import Callable

import torch
from torch import Tensor
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

# Chapter 9: the log-sum-exp computed online.

# Reductions and elementwise steps that, applied to a whole row at once, mean the row was not
# walked in blocks: a first pass for the maximum, or the answer from torch itself.
_ROW_AT_ONCE = frozenset(
    {"amax", "max", "sum", "exp", "logsumexp", "softmax", "log_softmax", "sort", "topk"}
)


class _Refuses(TorchFunctionMode):
    """Fails the check when ``refuse(name, tensors)`` returns a reason for a torch call."""

    def __init__(self, refuse: Callable[[str, list[Tensor]], str | None]) -> None:
        super().__init__()
        self.refuse = refuse

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
        reason = self.refuse(getattr(func, "__name__", ""), tensors)
        if reason is not None:
            _fail(reason)
        return func(*args, **kwargs)


def _whole_row(length: int, block_size: int) -> Callable[[str, list[Tensor]], str | None]:
    def refuse(name: str, tensors: list[Tensor]) -> str | None:
        if name in _ROW_AT_ONCE and any(t.dim() and t.size(-1) == length for t in tensors):
            return (
                f"online_logsumexp(x (4, 7, {length}), {block_size}) called {name} on whole "
                f"rows of {length} numbers: the task is one pass over blocks of {block_size}, "
                "with a running maximum and a running sum updated block by block"
            )
        return None

    return refuse


@_checker
def check_online_logsumexp(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x (..., S), block_size)`` -> log sum_j exp(x_j) per row (...,), in one blocked pass."""
    rows = torch.randn(4, 7, 45, generator=_generator(0)) * 5  # (..., S)
    expected = torch.logsumexp(rows, dim=-1)  # (4, 7)
    for block_size in (1, 8, 45, 100):
        call = f"online_logsumexp(x (4, 7, 45), {block_size})"
        result = _as_tensor(_call(fn, call, rows.clone(), block_size), call, "a tensor")
        if tuple(result.shape) != (4, 7):
            _fail(
                f"{call} should return one value per row, shape (4, 7), got {tuple(result.shape)}"
            )
        if not _close(result, expected, atol=1e-4):
            _fail(
                f"{call} differs from torch.logsumexp by up to "
                f"{(result - expected).abs().max().item():.3g}: when the running maximum "
                f"grows, multiply the running sum by exp(old max - new max)"
            )
    huge = torch.tensor([[1000.0, 1000.0]])  # exp(1000) overflows float32
    call = "online_logsumexp([[1000, 1000]], 1)"
    result = _as_tensor(_call(fn, call, huge, 1), call, "a tensor")
    if not torch.isfinite(result).all():
        _fail(
            f"{call} is not finite: exp(1000) overflows float32, so subtract the running "
            "maximum before exponentiating"
        )
    tiny = torch.tensor([[-1000.0, -1000.0]])  # exp(-1000) underflows to 0 in float32
    call = "online_logsumexp([[-1000, -1000]], 1)"
    result = _as_tensor(_call(fn, call, tiny, 1), call, "a tensor")
    if not _close(result, torch.logsumexp(tiny, dim=-1), atol=1e-3):
        _fail(
            f"{call} returned {result.flatten().tolist()}, expected about -999.307: start the "
            "running maximum at -inf, not 0, or rows far below 0 underflow to log(0)"
        )
    with _Refuses(_whole_row(rows.size(-1), 8)):
        _call(fn, "online_logsumexp(x (4, 7, 45), 8)", rows.clone(), 8)
    _succeed("m + log(l) after the last block is the log-sum-exp of the whole row")


# Chapter 9 (backward pass): the gradients of one block of queries, from the saved lse.


def _backward_case(seed: int) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], float]:
    """Inputs (q, k, v, out, lse, d_out), float64 autograd's (dq, dk, dv), and the scale."""
    generator = _generator(seed)
    q, k, v = (torch.randn(n, 4, generator=generator, dtype=torch.float64) for n in (3, 5, 5))
    d_out = torch.randn(3, 4, generator=generator, dtype=torch.float64)  # (T, d_v)
    scale = 0.5
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    scores = leaves[0] @ leaves[1].T * scale  # (T, S)
    out = torch.softmax(scores, dim=-1) @ leaves[2]  # (T, d_v)
    expected = torch.autograd.grad(out, leaves, d_out)
    lse = torch.logsumexp(scores.detach(), dim=-1, keepdim=True)  # (T, 1)
    return (q, k, v, out.detach(), lse, d_out), expected, scale


def _no_softmax_or_autograd(name: str, tensors: list[Tensor]) -> str | None:
    if name in {"softmax", "log_softmax", "requires_grad_", "backward", "grad"}:
        return (
            f"attention_backward called {name}: the task is to write the gradients yourself, "
            "recomputing the weights as A = exp(q k^T * scale - lse), with no softmax call "
            "and no autograd"
        )
    return None


@_checker
def check_attention_backward(fn: Callable[..., tuple]) -> None:
    """``fn(q (T, d), k (S, d), v (S, d_v), out (T, d_v), lse (T, 1), d_out (T, d_v), scale)``
    -> (dq, dk, dv): the gradients of softmax(q k^T * scale) v, recomputing the weights A from
    ``lse``."""
    inputs, expected, scale = _backward_case(0)
    call = "attention_backward(q (3, 4), k (5, 4), v (5, 4), out, lse, d_out, 0.5)"
    result = _call(fn, call, *(t.clone() for t in inputs), scale)
    if not isinstance(result, tuple | list) or len(result) != 3:
        _fail(f"{call} should return a tuple (dq, dk, dv), got {type(result).__name__}")
    names = ("dq", "dk", "dv")
    for name, ours, theirs in zip(names, result, expected, strict=True):
        ours = _as_tensor(ours, call, f"{name} as a tensor")
        if tuple(ours.shape) != tuple(theirs.shape):
            _fail(
                f"{call}: {name} should have shape {tuple(theirs.shape)}, got {tuple(ours.shape)}"
            )
    with _Refuses(_no_softmax_or_autograd):
        _call(fn, call, *(t.clone() for t in inputs), scale)
    dq, dk, dv = result
    if not _close(dv, expected[2], atol=1e-6):
        _fail(f"{call}: dv is wrong; dv = A^T d_out with the weights A = exp(q k^T * scale - lse)")
    if _close(dq * 0.5, expected[0], atol=1e-6) or _close(dk * 0.5, expected[1], atol=1e-6):
        _fail(
            f"{call}: dq or dk is 1 / scale times too large: the scores are q k^T * scale, so "
            "multiply dZ by the scale"
        )
    if not (_close(dq, expected[0], atol=1e-6) and _close(dk, expected[1], atol=1e-6)):
        _fail(
            f"{call}: dq or dk is wrong; dZ = A * (dA - delta) with dA = d_out v^T and "
            "delta = rowsum(d_out * out), then dq = dZ k * scale and dk = dZ^T q * scale"
        )
    _succeed(
        "dZ = A * (dA - delta) with delta = rowsum(dO * O); dq = dZ k * scale, "
        "dk = dZ^T q * scale, dv = A^T dO"
    )
