"""Additive (Bahdanau) attention: additive scores, a softmax over the keys, a weighted sum."""

from torch import Tensor

from attnbook.core._checks import (
    check_mask,
    check_query_key,
    check_same_batch_dims,
    check_same_dtype,
    check_tensor,
    shape_of,
)
from attnbook.core.attention import masked_softmax
from attnbook.core.scoring import AdditiveScore
from attnbook.core.trace import record


class AdditiveAttention(AdditiveScore):
    """Attention with Bahdanau's score v^T tanh(W_q q + W_k k_j) (Bahdanau et al., 2014).

    ``forward(query, key, value, mask=None)`` takes query (..., T, d_q), key (..., S, d_k) and
    value (..., S, d_v) with equal batch dims ``...`` and returns ``(context, weights)`` of
    shapes (..., T, d_v) and (..., T, S). A decoder attending once per step passes T = 1.
    ``mask`` follows :func:`attnbook.scaled_dot_product_attention`: bool True = attend (e.g. a
    padding mask ``padding_mask(lengths, S)[:, None, :]``) or float added, broadcastable to
    (..., T, S). The scores are those of :class:`attnbook.AdditiveScore`, whose parameters
    ``W_q``, ``W_k`` and ``v`` this module inherits.
    """

    def _check_value_and_mask(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None
    ) -> None:
        check_tensor("value", value, "(..., S, d_v)", rank=query.dim())
        check_same_batch_dims("value", value, query)
        check_same_dtype("value", value, query, "query")
        if value.size(-2) != key.size(-2):
            raise ValueError(
                f"value: expected shape (..., S, d_v) with S = {key.size(-2)} as in key, got "
                f"value.shape = {shape_of(value)}"
            )
        if mask is not None:
            check_mask(mask, (*query.shape[:-1], key.size(-2)), "(..., T, S)")

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        check_query_key(query, key, self.query_dim, self.key_dim)
        self._check_value_and_mask(query, key, value, mask)
        scores = self._score(query, key)  # (..., T, S)
        weights = masked_softmax(scores, mask)  # (..., T, S)
        record("weights", weights, "... T S", "softmax over keys")
        context = weights @ value  # (..., T, d_v)
        record("context", context, "... T d_v", "weighted sum of values")
        return context, weights
