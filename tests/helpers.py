"""Shared test helpers: devices, per-dtype tolerances, float64 references, seeded inputs."""

import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from matplotlib import pyplot as plt
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


def raises(pattern):
    """Expect a ValueError whose message contains ``pattern`` literally (no regex)."""
    return pytest.raises(ValueError, match=re.escape(pattern))


def seeded_tensors(*shapes, seed=0, dtype=torch.float32, device="cpu"):
    """Standard normal tensors of the given shapes from one private generator, in order."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=generator).to(device=device, dtype=dtype) for s in shapes]


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
    """Seeded query (B, H, T, d), key (B, H, S, d) and value (B, H, S, d_v) tensors."""
    value_dim = head_dim if value_dim is None else value_dim
    return seeded_tensors(
        (batch, heads, query_len, head_dim),
        (batch, heads, key_len, head_dim),
        (batch, heads, key_len, value_dim),
        seed=seed,
        dtype=dtype,
        device=device,
    )


def seeded_randn(*shape, device="cpu", seed=1):
    """Standard normal numbers from a private generator: the same on every device."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def mha_pair(d_model, n_heads, device, *, bias=True):
    """A seeded nn.MultiheadAttention and an attnbook MultiHeadAttention holding its weights."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True).to(device)
    ours = MultiHeadAttention(d_model, n_heads, bias=bias).to(device).copy_weights_from(theirs)
    return ours.eval(), theirs.eval()


def linear_float64(layer, x):
    """An nn.Linear applied in float64 on the CPU: x W^T + b."""
    bias = None if layer.bias is None else as_float64(layer.bias)
    return F.linear(as_float64(x), as_float64(layer.weight), bias)


def grouped_attention_reference(module, query, key=None, value=None, *, mask=None, is_causal=False):
    """What a GroupedQueryAttention computes, in float64 on the CPU, from its weights.

    Heads are split with plain view/transpose and shared by PyTorch's SDPA with
    ``enable_gqa=True``, so none of the library's head or attention code takes part.
    query (B, T, D), key and value (B, S, D), default self-attention; returns (B, T, D).
    """
    key = query if key is None else key
    value = key if value is None else value

    def heads(projection, x, count):
        projected = linear_float64(projection, x)  # (B, L, count * d_head)
        return projected.view(x.size(0), x.size(1), count, -1).transpose(1, 2)  # (B, count, L, d)

    q = heads(module.q_proj, query, module.n_heads)  # (B, H, T, d_head)
    k = heads(module.k_proj, key, module.n_kv_heads)  # (B, H_kv, S, d_head)
    v = heads(module.v_proj, value, module.n_kv_heads)  # (B, H_kv, S, d_head)
    if mask is not None:
        mask = mask.cpu() if mask.dtype == torch.bool else as_float64(mask)
    attended = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True
    )  # (B, H, T, d_head)
    merged = attended.transpose(1, 2).reshape(query.size(0), query.size(1), -1)  # (B, T, D)
    return linear_float64(module.out_proj, merged)  # (B, T, D)


def figure_texts(figure) -> list[str]:
    """Every text drawn on the figure's axes, in drawing order; the figure is closed (pyplot
    forgets it, so tests do not pile up open figures), but stays readable."""
    found = [t.get_text() for ax in figure.axes for t in ax.texts]
    plt.close(figure)
    return found


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name):
    """The module ``scripts/<name>.py``, imported from its path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_repeats_first_evaluations(history, recorded, tolerance=1e-5):
    """A short live ``history`` repeats the first evaluations of a shipped ``recorded`` one:
    the same steps, each validation loss within ``tolerance``."""
    count = len(history.steps)
    assert history.steps == recorded.steps[:count]
    pairs = zip(history.validation_losses, recorded.validation_losses[:count], strict=True)
    for live, shipped in pairs:
        assert abs(live - shipped) <= tolerance, (live, shipped)
