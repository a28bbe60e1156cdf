"""Linear attention (Katharopoulos et al., 2020): softmax's exp(q . k) replaced by phi(q) . phi(k).

With a feature map phi >= 0 (``"elu"``: elu(x) + 1), query t's output is

    o_t = phi(q_t)^T S_t / phi(q_t)^T z_t,   S_t = sum_{j <= t} phi(k_j) v_j^T,   z_t = sum phi(k_j)

so causal attention is a running sum: a state S (d_k x d_v) and a normaliser z (d_k), whatever
the length, in place of a cache of every key and value. :func:`linear_attention` computes it in
three forms that give the same numbers:

* ``"parallel"``: the (T, T) matrix phi(Q) phi(K)^T, masked and row-normalised, times V, like
  softmax attention (O(T^2) work, one matrix product).
* ``"recurrent"``: S and z updated token by token (O(T) work, T sequential steps): decoding.
* ``"chunked"``: chunks of C tokens, parallel inside a chunk, the state carried between chunks
  (T / C sequential steps): how such layers are trained.

Without ``causal`` every query sees every key: one state for the whole sequence.
"""

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn import functional as F

from attnbook.core._checks import check_bool, check_choice, check_int
from attnbook.linear._checks import check_qkv

FORMS = ("parallel", "recurrent", "chunked")
FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {"elu": lambda x: F.elu(x) + 1.0}


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    feature_map: str = "elu",
    causal: bool = True,
    form: str = "parallel",
    chunk_size: int = 64,
) -> Tensor:
    """Linear attention's output (B, H, T, d_v) for q, k (B, H, T, d_k) and v (B, H, T, d_v).

    ``feature_map``: ``"elu"`` (elu(x) + 1, positive, so every denominator is > 0).
    ``form``: ``"parallel"``, ``"recurrent"`` or ``"chunked"`` (with ``chunk_size`` tokens per
    chunk); all three agree to rounding.
    """
    check_qkv(q, k, v)
    check_choice("feature_map", feature_map, tuple(FEATURE_MAPS))
    check_bool("causal", causal)
    check_choice("form", form, FORMS)
    check_int("chunk_size", chunk_size)
    phi = FEATURE_MAPS[feature_map]
    q, k = phi(q), phi(k)  # (B, H, T, d_k), positive
    if not causal:
        state = k.transpose(-1, -2) @ v  # (B, H, d_k, d_v)
        normaliser = k.sum(dim=2)  # (B, H, d_k)
        return (q @ state) / (q @ normaliser[..., None])  # (B, H, T, d_v)
    if form == "parallel":
        return _parallel(q, k, v)
    if form == "recurrent":
        return _recurrent(q, k, v)
    return _chunked(q, k, v, chunk_size)


def linear_attention_weights(q: Tensor, k: Tensor, *, feature_map: str = "elu") -> Tensor:
    """Causal weights (B, H, T, T) of linear attention: rows of phi(q) . phi(k) summing to 1.

    What the parallel form multiplies V by; softmax's weights with exp(q . k) in their place.
    """
    check_qkv(q, k, k)
    check_choice("feature_map", feature_map, tuple(FEATURE_MAPS))
    phi = FEATURE_MAPS[feature_map]
    length = q.size(2)
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()  # (T, T)
    # (B, H, T, T)
    similarity = (phi(q) @ phi(k).transpose(-1, -2)).masked_fill(~causal, 0.0)
    return similarity / similarity.sum(dim=-1, keepdim=True)


def _parallel(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    length = q.size(2)
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()  # (T, T)
    similarity = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # (B, H, T, T)
    return (similarity @ v) / similarity.sum(dim=-1, keepdim=True)  # (B, H, T, d_v)


def _recurrent(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    state = q.new_zeros(*q.shape[:2], q.size(-1), v.size(-1))  # (B, H, d_k, d_v)
    normaliser = q.new_zeros(*q.shape[:2], q.size(-1))  # (B, H, d_k)
    outputs = []
    for t in range(q.size(2)):
        state = state + k[:, :, t, :, None] * v[:, :, t, None, :]  # (B, H, d_k, d_v)
        normaliser = normaliser + k[:, :, t]  # (B, H, d_k)
        numerator = torch.einsum("bhk,bhkv->bhv", q[:, :, t], state)  # (B, H, d_v)
        denominator = (q[:, :, t] * normaliser).sum(-1, keepdim=True)  # (B, H, 1)
        outputs.append(numerator / denominator)
    if not outputs:
        return v.new_zeros(v.shape)
    return torch.stack(outputs, dim=2)  # (B, H, T, d_v)


def _chunked(q: Tensor, k: Tensor, v: Tensor, chunk_size: int) -> Tensor:
    state = q.new_zeros(*q.shape[:2], q.size(-1), v.size(-1))  # (B, H, d_k, d_v)
    normaliser = q.new_zeros(*q.shape[:2], 1, q.size(-1))  # (B, H, 1, d_k)
    outputs = []
    for start in range(0, q.size(2), chunk_size):
        qc, kc, vc = (x[:, :, start : start + chunk_size] for x in (q, k, v))  # (B, H, C, d)
        size = qc.size(2)
        causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()  # (C, C)
        similarity = (qc @ kc.transpose(-1, -2)).masked_fill(~causal, 0.0)  # (B, H, C, C)
        # (B, H, C, d_v): earlier chunks through the state, this chunk explicitly
        numerator = qc @ state + similarity @ vc
        # (B, H, C, 1)
        denominator = (qc * normaliser).sum(-1, keepdim=True) + similarity.sum(-1, keepdim=True)
        outputs.append(numerator / denominator)
        state = state + kc.transpose(-1, -2) @ vc  # (B, H, d_k, d_v)
        normaliser = normaliser + kc.sum(dim=2, keepdim=True)  # (B, H, 1, d_k)
    if not outputs:
        return v.new_zeros(v.shape)
    return torch.cat(outputs, dim=2)  # (B, H, T, d_v)
