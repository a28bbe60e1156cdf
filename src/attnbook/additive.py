"""Additive (Bahdanau) attention: a small feed-forward network scores each query-key pair."""

import torch
from torch import Tensor, nn

from attnbook._checks import check_mask, check_tensor, shape_of
from attnbook.attention import masked_softmax
from attnbook.trace import record


class AdditiveAttention(nn.Module):
    """score(q, k_j) = v^T tanh(W_q q + W_k k_j) (Bahdanau et al., 2014), softmax over the keys.

    ``forward(query, keys, values, mask=None)`` takes query (B, T, d_q), keys (B, S, d_k) and
    values (B, S, d_v), and returns ``(context, weights)`` of shapes (B, T, d_v) and (B, T, S).
    A decoder attending once per step passes T = 1. ``mask`` follows
    :func:`attnbook.scaled_dot_product_attention`: bool True = attend (e.g. a padding mask
    ``padding_mask(lengths, S)[:, None, :]``) or float added, broadcastable to (B, T, S).
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def _check_inputs(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None
    ) -> None:
        check_tensor("query", query, "(B, T, d_q)", rank=3)
        check_tensor("keys", keys, "(B, S, d_k)", rank=3)
        check_tensor("values", values, "(B, S, d_v)", rank=3)
        for name, tensor, width in (("query", query, self.query_dim), ("keys", keys, self.key_dim)):
            if tensor.size(-1) != width:
                raise ValueError(
                    f"{name}: expected last dim {width} (set at construction), got "
                    f"{name}.shape = {shape_of(tensor)}"
                )
        if keys.size(0) != query.size(0) or values.shape[:2] != keys.shape[:2]:
            raise ValueError(
                f"values: expected query (B, T, d_q), keys (B, S, d_k), values (B, S, d_v) with "
                f"one B and one S; got query {shape_of(query)}, keys {shape_of(keys)}, "
                f"values {shape_of(values)}"
            )
        if mask is not None:
            check_mask(mask, (query.size(0), query.size(1), keys.size(1)), "(B, T, S)")

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        self._check_inputs(query, keys, values, mask)
        projected_query = self.W_q(query)  # (B, T, hidden)
        projected_keys = self.W_k(keys)  # (B, S, hidden)
        features = torch.tanh(
            projected_query[:, :, None, :] + projected_keys[:, None, :, :]
        )  # (B, T, S, hidden)
        record("features", features, "B T S hidden", "tanh(W_q q + W_k k) for every pair")
        scores = self.v(features).squeeze(-1)  # (B, T, S)
        record("scores", scores, "B T S", "v^T features: one score per query-key pair")
        weights = masked_softmax(scores, mask)  # (B, T, S)
        record("weights", weights, "B T S", "softmax over keys")
        context = weights @ values  # (B, T, d_v)
        record("context", context, "B T d_v", "weighted sum of values")
        return context, weights
