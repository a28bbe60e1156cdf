"""Score functions: how much a query matches each key, before the softmax.

Each module maps query (..., T, d_q) and key (..., S, d_k), with equal batch dims ``...``, to
scores (..., T, S): one number per query-key pair, rows over the keys.

- :class:`DotScore`: q . k (Luong et al., 2015), needs d_q = d_k, no parameters.
- :class:`ScaledDotScore`: q . k / sqrt(d) (Vaswani et al., 2017), the transformer's score.
- :class:`GeneralScore`: q^T W k, a bilinear form (Luong et al.'s "general"), d_q x d_k weights.
- :class:`AdditiveScore`: v^T tanh(W_q q + W_k k) (Bahdanau et al., 2014), the score inside
  :class:`attnbook.AdditiveAttention`; its parameters have the same names and shapes, so
  ``AdditiveScore(...).load_state_dict(additive_attention.state_dict())`` works.
"""

import math

import torch
from torch import Tensor, nn

from attnbook.core._checks import (
    check_int,
    check_query_key,
    check_scale,
    shape_of,
)
from attnbook.core.trace import record


def _check_same_width(query: Tensor, key: Tensor) -> None:
    if key.size(-1) != query.size(-1):
        raise ValueError(
            f"key: a dot product needs d_k = d_q = {query.size(-1)}, got "
            f"key.shape = {shape_of(key)}, query.shape = {shape_of(query)}; "
            "use GeneralScore or AdditiveScore for different widths"
        )


class DotScore(nn.Module):
    """score(q, k) = q . k: no parameters, d_q must equal d_k."""

    def forward(self, query: Tensor, key: Tensor) -> Tensor:
        check_query_key(query, key, None, None)
        _check_same_width(query, key)
        scores = query @ key.transpose(-2, -1)  # (..., T, S)
        record("dot scores", scores, "... T S", "q . k for every query-key pair")
        return scores


class ScaledDotScore(nn.Module):
    """score(q, k) = q . k * scale, with scale = 1 / sqrt(d) unless given (finite).

    The query is scaled *before* the dot product: in float16 a q . k of a few tens of thousands
    overflows to inf, while q * scale . k fits.
    """

    def __init__(self, scale: float | None = None) -> None:
        super().__init__()
        check_scale(scale)
        self.scale = scale

    def forward(self, query: Tensor, key: Tensor) -> Tensor:
        check_query_key(query, key, None, None)
        _check_same_width(query, key)
        scale = 1.0 / math.sqrt(query.size(-1)) if self.scale is None else self.scale
        scores = (query * scale) @ key.transpose(-2, -1)  # (..., T, S)
        record("scaled dot scores", scores, "... T S", "q . k / sqrt(d) for every pair")
        return scores


class GeneralScore(nn.Module):
    """score(q, k) = q^T W k with a learned W of shape (d_q, d_k); W = I gives the dot score."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        check_int("query_dim", query_dim)
        check_int("key_dim", key_dim)
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.W = nn.Parameter(torch.randn(query_dim, key_dim) / math.sqrt(key_dim))

    def forward(self, query: Tensor, key: Tensor) -> Tensor:
        check_query_key(query, key, self.query_dim, self.key_dim)
        mapped_key = key @ self.W.T  # (..., S, d_q)
        record("W k", mapped_key, "... S d_q", "each key mapped into the query space")
        scores = query @ mapped_key.transpose(-2, -1)  # (..., T, S)
        record("general scores", scores, "... T S", "q . (W k) for every pair")
        return scores


class AdditiveScore(nn.Module):
    """score(q, k) = v^T tanh(W_q q + W_k k): a one-hidden-layer network on every pair."""

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        for name, width in (
            ("query_dim", query_dim),
            ("key_dim", key_dim),
            ("hidden_dim", hidden_dim),
        ):
            check_int(name, width)
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, query: Tensor, key: Tensor) -> Tensor:
        check_query_key(query, key, self.query_dim, self.key_dim)
        return self._score(query, key)

    def _score(self, query: Tensor, key: Tensor) -> Tensor:
        """The arithmetic of :meth:`forward`, for callers that have checked their inputs."""
        projected_query = self.W_q(query)  # (..., T, d_attn)
        projected_key = self.W_k(key)  # (..., S, d_attn)
        record("W_q q", projected_query, "... T d_attn", "each query projected once")
        record("W_k k", projected_key, "... S d_attn", "each key projected once")
        features = torch.tanh(
            projected_query.unsqueeze(-2) + projected_key.unsqueeze(-3)
        )  # (..., T, S, d_attn)
        record("features", features, "... T S d_attn", "tanh(W_q q + W_k k) for every pair")
        scores = self.v(features).squeeze(-1)  # (..., T, S)
        record("additive scores", scores, "... T S", "v^T features for every pair")
        return scores
