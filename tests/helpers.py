"""Shared test helpers: the devices to test on, per-dtype tolerances, a float64 reference."""

import math

import torch
from torch import nn

from attnbook import MultiHeadAttention

DEVICES = ["cpu"]
if torch.cuda.is_available():
    DEVICES.append("cuda")
if torch.backends.mps.is_available():
    DEVICES.append("mps")

# Worst errors of a naive implementation against float64 measured at about 1.5e-6 (fp32),
# 2e-3 (fp16) and 1.6e-2 (bf16); these bounds sit just above them.
TOLERANCES = {
    torch.float32: {"atol": 1e-5, "rtol": 1.3e-6},
    torch.float16: {"atol": 5e-3, "rtol": 5e-3},
    torch.bfloat16: {"atol": 3e-2, "rtol": 1.6e-2},
}
DTYPES = list(TOLERANCES)


def as_float64(tensor):
    """A CPU float64 copy: the reference precision (MPS has no float64, so always on the CPU)."""
    return tensor.detach().cpu().to(torch.float64)


def reference_attention(query, key, value, mask=None, scale=None):
    """softmax(q k^T * scale + mask) v in float64 on the CPU with torch.softmax.

    Fully masked rows, NaN in torch.softmax, are set to zero: the library's documented result.
    """
    query, key, value = (as_float64(t) for t in (query, key, value))
    mask = None if mask is None else mask.cpu()
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(torch.float64)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def random_qkv(
    batch,
    heads,
    query_len,
    key_len,
    head_dim,
    *,
    dtype=torch.float32,
    device="cpu",
    value_dim=None,
    seed=0,
):
    generator = torch.Generator().manual_seed(seed)
    value_dim = head_dim if value_dim is None else value_dim
    shapes = [
        (batch, heads, query_len, head_dim),
        (batch, heads, key_len, head_dim),
        (batch, heads, key_len, value_dim),
    ]
    return [torch.randn(s, generator=generator).to(device=device, dtype=dtype) for s in shapes]


def seeded_randn(*shape, device="cpu", seed=1):
    """Standard normal numbers from a private generator: the same on every device."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def mha_pair(d_model, n_heads, device, *, bias=True):
    """A seeded nn.MultiheadAttention and an attnbook MultiHeadAttention holding its weights."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True).to(device)
    ours = MultiHeadAttention(d_model, n_heads, bias=bias).to(device).copy_weights_from(theirs)
    return ours.eval(), theirs.eval()
