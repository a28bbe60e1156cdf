"""Multi-head behaviour that chapter 5 relies on and test_multihead.py does not cover.

A loop of single heads equals the batched module once the heads' weights are stacked; the
fused (3D, D) projection of nn.MultiheadAttention equals our three projections; parameters and
FLOPs do not depend on the number of heads; PyTorch's default weights are our heads' mean;
cross-attention with T != S and key != value matches nn.MultiheadAttention.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, mha_pair, seeded_randn
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnbook import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
    trace_shapes,
)

D_MODEL, N_HEADS = 12, 3
HEAD_DIM = D_MODEL // N_HEADS


def make_pair(device):
    return mha_pair(D_MODEL, N_HEADS, device)


@pytest.mark.parametrize("device", DEVICES)
def test_loop_of_single_heads_equals_module_with_stacked_weights(device):
    torch.manual_seed(0)
    heads = [
        {role: nn.Linear(D_MODEL, HEAD_DIM).to(device) for role in ("q", "k", "v")}
        for _ in range(N_HEADS)
    ]
    out_proj = nn.Linear(D_MODEL, D_MODEL).to(device)
    x = seeded_randn(2, 5, D_MODEL, device=device)

    outputs, weights = zip(
        *(scaled_dot_product_attention(h["q"](x), h["k"](x), h["v"](x)) for h in heads),
        strict=True,
    )
    expected = out_proj(torch.cat(outputs, dim=-1))  # (B, T, D)
    expected_weights = torch.stack(weights, dim=1)  # (B, H, T, S)

    module = MultiHeadAttention(D_MODEL, N_HEADS).to(device).eval()
    with torch.no_grad():
        for role in ("q", "k", "v"):
            projection = getattr(module, f"{role}_proj")
            projection.weight.copy_(torch.cat([h[role].weight for h in heads]))
            projection.bias.copy_(torch.cat([h[role].bias for h in heads]))
        module.out_proj.load_state_dict(out_proj.state_dict())
    output, module_weights = module(x, need_weights=True)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(module_weights, expected_weights)
    torch.testing.assert_close(module(x)[0], expected)


@pytest.mark.parametrize("device", DEVICES)
def test_in_proj_weight_is_the_fused_qkv_projection(device):
    ours, theirs = make_pair(device)
    x = seeded_randn(2, 5, D_MODEL, device=device)
    fused = F.linear(x, theirs.in_proj_weight, theirs.in_proj_bias).chunk(3, dim=-1)
    for chunk, projection in zip(fused, (ours.q_proj, ours.k_proj, ours.v_proj), strict=True):
        torch.testing.assert_close(chunk, projection(x))
    for h in range(N_HEADS):  # head h of W_q is rows h * d_head .. (h + 1) * d_head
        rows = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
        head_q = F.linear(x, theirs.in_proj_weight[rows], theirs.in_proj_bias[rows])
        torch.testing.assert_close(head_q, split_heads(ours.q_proj(x), N_HEADS)[:, h])


@pytest.mark.parametrize("device", DEVICES)
def test_default_averaged_weights_are_the_mean_of_our_heads(device):
    ours, theirs = make_pair(device)
    x = seeded_randn(2, 5, D_MODEL, device=device)
    keep = padding_mask([5, 3], 5, device=device)  # (B, S)
    allowed = keep[:, None, None, :] & causal_mask(5, device=device)  # (B, 1, T, S)
    with torch.no_grad():
        output, weights = ours(x, mask=allowed, need_weights=True)
        expected, averaged = theirs(
            x, x, x, attn_mask=~causal_mask(5, device=device), key_padding_mask=~keep
        )
    assert averaged.shape == (2, 5, 5)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights.mean(dim=1), averaged)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_heads", [1, 2, 4, 8])
def test_parameter_count_does_not_depend_on_heads(n_heads, bias):
    width = 64
    module = MultiHeadAttention(width, n_heads, bias=bias)
    count = sum(p.numel() for p in module.parameters())
    assert count == 4 * width**2 + (4 * width if bias else 0)
    torch_module = nn.MultiheadAttention(width, n_heads, bias=bias)
    assert count == sum(p.numel() for p in torch_module.parameters())


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8])
def test_explicit_path_flops_do_not_depend_on_heads(n_heads):
    batch, length, source_length, width = 2, 10, 7, 64
    module = MultiHeadAttention(width, n_heads).eval()
    query, memory = (
        seeded_randn(batch, length, width),
        seeded_randn(batch, source_length, width, seed=2),
    )
    with FlopCounterMode(display=False) as flops:
        module(query, memory, need_weights=True)
    projections = 2 * batch * (2 * length + 2 * source_length) * width**2  # q, out; k, v
    attention = 2 * 2 * batch * length * source_length * width  # scores and weights @ v
    assert flops.get_total_flops() == projections + attention


@pytest.mark.parametrize("device", DEVICES)
def test_cross_attention_with_distinct_key_and_value_matches_nn_multihead(device):
    ours, theirs = make_pair(device)
    query = seeded_randn(2, 4, D_MODEL, device=device)
    key = seeded_randn(2, 7, D_MODEL, device=device, seed=2)
    value = seeded_randn(2, 7, D_MODEL, device=device, seed=3)
    keep = padding_mask([7, 5], 7, device=device)  # (B, S)
    with torch.no_grad():
        expected, expected_weights = theirs(
            query, key, value, key_padding_mask=~keep, average_attn_weights=False
        )
        with trace_shapes() as trace:
            explicit, weights = ours(
                query, key, value, mask=keep[:, None, None, :], need_weights=True
            )
        fused, _ = ours(query, key, value, mask=keep[:, None, None, :])
    assert trace["q"] == (2, N_HEADS, 4, HEAD_DIM)
    assert trace["k"] == (2, N_HEADS, 7, HEAD_DIM)
    assert trace["scores"] == (2, N_HEADS, 4, 7)
    assert trace["output"] == (2, 4, D_MODEL)
    torch.testing.assert_close(explicit, expected)
    torch.testing.assert_close(fused, expected)
    torch.testing.assert_close(weights, expected_weights)
    swapped, _ = ours(query, value, key)
    assert not torch.allclose(swapped, explicit), "key and value must not be interchangeable"


def test_direct_view_to_heads_mixes_tokens_but_split_heads_does_not():
    x = (10 * torch.arange(3)[:, None] + torch.arange(4))[None].float()  # entry 10 t + f
    heads = split_heads(x, 2)  # (B, H, T, d_head)
    tokens_in_each_head = (heads // 10).amax(dim=-1) == (heads // 10).amin(dim=-1)
    assert tokens_in_each_head.all(), "every row of a head must come from one token"
    assert torch.equal(heads[0, :, :, 0] // 10, torch.arange(3).expand(2, 3).float())
    wrong = x.view(1, 2, 3, 2)
    assert not torch.equal(wrong, heads)
    assert torch.equal(wrong[0, 0, 1], torch.tensor([2.0, 3.0]))  # token 0's second half


def test_scale_uses_the_head_width_not_the_model_width():
    ours, _ = make_pair("cpu")
    x = seeded_randn(1, 5, D_MODEL)
    _, weights = ours(x, need_weights=True)
    q = split_heads(ours.q_proj(x), N_HEADS)
    k = split_heads(ours.k_proj(x), N_HEADS)
    expected = (q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)).softmax(dim=-1)
    torch.testing.assert_close(weights, expected)


def ten_line_multi_head(x, attention, n_heads):
    """Chapter 5's clean batched multi-head function, as printed there."""
    batch_size, length, width = x.shape
    d_head = width // n_heads
    q = attention.q_proj(x).view(batch_size, length, n_heads, d_head).transpose(1, 2)
    k = attention.k_proj(x).view(batch_size, length, n_heads, d_head).transpose(1, 2)
    v = attention.v_proj(x).view(batch_size, length, n_heads, d_head).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (B, H, T, S)
    heads = scores.softmax(dim=-1) @ v  # (B, H, T, d_head)
    merged = heads.transpose(1, 2).reshape(batch_size, length, width)  # (B, T, D)
    return attention.out_proj(merged)  # (B, T, D)


@pytest.mark.parametrize("device", DEVICES)
def test_the_ten_line_function_equals_the_module_and_nn_multihead(device):
    ours, theirs = make_pair(device)
    x = seeded_randn(2, 5, D_MODEL, device=device)
    with torch.no_grad():
        clean = ten_line_multi_head(x, ours, N_HEADS)
        torch.testing.assert_close(clean, ours(x)[0])
        torch.testing.assert_close(clean, theirs(x, x, x, need_weights=False)[0])


def test_the_chapter_prints_the_ten_line_function_tested_here():
    import inspect
    import json
    import pathlib

    notebook = pathlib.Path(__file__).resolve().parents[1] / "book" / "05_multi_head.ipynb"
    sources = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]]
    printed = next(s for s in sources if s.startswith("def multi_head("))
    body = inspect.getsource(ten_line_multi_head).split('"""', 2)[2]
    statements = [line.strip() for line in body.splitlines() if line.strip()]
    assert all(statement in printed for statement in statements)
