"""Chapter 5's exercise checkers: one head's projection inside nn.MultiheadAttention's packed
weight; removing one head by zeroing the columns of W_o that read it.
"""

from collections.abc import Callable

import torch
from torch import nn

from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)
from attnbook.layers.multihead import MultiHeadAttention

# Chapter 5: one head's projection inside nn.MultiheadAttention's packed weight.


@_checker
def check_head_projection(fn: Callable[[nn.MultiheadAttention, str, int], tuple]) -> None:
    """``fn(torch_mha, role, h)`` -> (weight (d_head, D), bias (d_head,)) of head h for role."""
    width, n_heads = 12, 3
    head_width = width // n_heads
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(width, n_heads, batch_first=True)
    nn.init.normal_(torch_mha.in_proj_bias)
    slices = {
        (role, h): slice(index * width + h * head_width, index * width + (h + 1) * head_width)
        for index, role in enumerate("qkv")
        for h in range(n_heads)
    }
    for (role, h), rows in slices.items():
        call = f"head_projection(mha, {role!r}, {h})"
        answer = _call(fn, call, torch_mha, role, h)
        if not isinstance(answer, tuple) or len(answer) != 2:
            _fail(f"{call} should return a pair (weight, bias), got {type(answer).__name__}")
        weight, bias = (_as_tensor(part, call, "two tensors") for part in answer)
        if tuple(weight.shape) != (head_width, width):
            _fail(
                f"{call}: the weight has shape {tuple(weight.shape)}, expected (d_head, D) = "
                f"({head_width}, {width}): d_head rows of in_proj_weight"
            )
        if tuple(bias.shape) != (head_width,):
            _fail(f"{call}: the bias has shape {tuple(bias.shape)}, expected (d_head,)")
        if torch.equal(weight, torch_mha.in_proj_weight[rows]):
            if not torch.equal(bias, torch_mha.in_proj_bias[rows]):
                _fail(f"{call}: the weight is right, but the bias comes from other rows")
            continue
        for (other_role, other_h), other_rows in slices.items():
            if torch.equal(weight, torch_mha.in_proj_weight[other_rows]):
                _fail(
                    f"{call} returned the rows of role {other_role!r}, head {other_h}. "
                    f"in_proj_weight stacks W_q, W_k, W_v (D rows each), and inside each block "
                    f"head h owns rows h * d_head to (h + 1) * d_head"
                )
        _fail(f"{call}: these rows are not any one head's slice of in_proj_weight")
    _succeed("every head's slice of in_proj_weight and in_proj_bias is right")


# Chapter 5: removing one head by zeroing the columns of W_o that read it.


def _without_head_hint(pruned: nn.Module, original: nn.Module, h: int, head_width: int) -> str:
    """Name the usual mistake, judged from what the answer did to ``out_proj``."""
    weight, bias = pruned.out_proj.weight, pruned.out_proj.bias
    columns = slice(h * head_width, (h + 1) * head_width)
    if not torch.equal(bias, original.out_proj.bias):
        return (
            "out_proj.bias changed: the bias is added after the heads are mixed and belongs to "
            "no head, so removing a head leaves it as it is"
        )
    if torch.equal(weight[columns], torch.zeros_like(weight[columns])) and not torch.equal(
        weight[:, columns], torch.zeros_like(weight[:, columns])
    ):
        return (
            f"rows {h * head_width} to {(h + 1) * head_width - 1} of out_proj.weight were zeroed: "
            "a weight is stored as (out features, in features), and head h is an *input* of "
            "W_o, so zero its columns, out_proj.weight[:, h * d_head:(h + 1) * d_head]"
        )
    zero_columns = [c for c in range(weight.size(1)) if not weight[:, c].any()]
    if zero_columns:
        return (
            f"the zeroed columns of out_proj.weight are {zero_columns}; head {h} is read by "
            f"columns {h * head_width} to {(h + 1) * head_width - 1}"
        )
    return "the output differs from the layer with head h's output set to zero"


@_checker
def check_without_head(fn: Callable[[nn.Module, int], nn.Module]) -> None:
    """``fn(attention, h)``: a copy of a MultiHeadAttention in which head h contributes nothing."""
    width, n_heads = 12, 3
    head_width = width // n_heads
    torch.manual_seed(0)
    attention = MultiHeadAttention(width, n_heads).eval()
    nn.init.normal_(attention.out_proj.bias)
    x = torch.randn(2, 5, width, generator=_generator(1))  # (B, T, D)
    original = {name: value.clone() for name, value in attention.state_dict().items()}
    for h in range(n_heads):
        call = f"without_head(attention, {h})"
        pruned = _call(fn, call, attention, h)
        changed = [
            name
            for name, value in attention.state_dict().items()
            if not torch.equal(value, original[name])
        ]
        if pruned is attention or changed:
            _fail(
                f"{call} changed the layer it was given ({', '.join(changed) or 'returned it'}): "
                "copy it first (copy.deepcopy) and change the copy"
            )
        if not isinstance(pruned, MultiHeadAttention):
            _fail(f"{call} should return a MultiHeadAttention, got {type(pruned).__name__}")
        gates = torch.ones(n_heads)  # (H,)
        gates[h] = 0.0
        with torch.no_grad():
            expected, _ = attention(x, head_mask=gates)  # (B, T, D)
            got, _ = _call(pruned, f"{call}(x)", x)  # (B, T, D)
        if not _close(got, expected, atol=1e-6):
            _fail(f"{call}: {_without_head_hint(pruned, attention, h, head_width)}")
    if _zeroes_head_columns(fn, attention, head_width):
        _succeed("each head's d_head columns of W_o are zeroed in a copy, and the bias is kept")
    else:
        _succeed(
            "head h contributes nothing in a copy, and out_proj's bias is kept (you did it "
            "without zeroing its d_head columns of W_o, which is what the solution does)"
        )


def _zeroes_head_columns(fn, attention: nn.Module, head_width: int) -> bool:
    """Whether fn(attention, h) zeroes head h's columns of out_proj.weight, for every h."""
    for h in range(attention.n_heads):
        weight = fn(attention, h).out_proj.weight  # (D, H * d_head)
        if weight[:, h * head_width : (h + 1) * head_width].any():
            return False
    return True
