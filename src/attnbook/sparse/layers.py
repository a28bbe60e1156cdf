"""Causal self-attention layers that read only the keys they pick: by MoBA, or by an indexer.

Both have the projections of :class:`attnbook.MultiHeadAttention` (``q_proj``, ``k_proj``,
``v_proj``, ``out_proj``, same names and shapes), so a dense layer's weights load into them.
``forward(x, need_weights=False)`` returns (output (B, T, D), weights (B, H, T, S) or None).

The layers attend with PyTorch's fused kernel under the selection's mask rather than gathering
the keys (:func:`attnbook.topk_attention`): the two are equal (tests/test_sparse.py checks it),
and at the book's T = 33 on a CPU the fused dense kernel is the faster; gathering pays off only
when k is a small share of a long S (see ``python -m attnbook.bench``).
"""

import torch
from torch import Tensor, nn

from attnbook.core._checks import check_int, check_model_input
from attnbook.core.attention import attend, scaled_dot_product_attention
from attnbook.core.heads import merge_heads, split_heads
from attnbook.sparse.indexer import LightningIndexer, dense_target, indexer_kl_loss, topk_tokens
from attnbook.sparse.moba import moba_mask
from attnbook.sparse.topk import selection_mask

MODES = ("dense", "warmup", "sparse", "exact")


class _Projections(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"n_heads: must divide d_model = {d_model}, got {n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        check_model_input("x", x, "(B, T, D)", self.d_model)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        # each (B, H, T, d_head)
        return tuple(split_heads(proj(x), self.n_heads) for proj in projections)

    def _finish(self, heads: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor | None]:
        return self.out_proj(merge_heads(heads)), weights  # (B, T, D), (B, H, T, S) or None


class MoBASelfAttention(_Projections):
    """Causal self-attention in which each query reads its ``top_k`` MoBA blocks (own included)."""

    def __init__(self, d_model: int, n_heads: int, *, block_size: int, top_k: int):
        super().__init__(d_model, n_heads)
        check_int("block_size", block_size)
        check_int("top_k", top_k)
        self.block_size, self.top_k = block_size, top_k

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        q, k, v = self._heads(x)  # (B, H, T, d_head) each
        mask = moba_mask(q, k, block_size=self.block_size, top_k=self.top_k)  # (B, H, T, S)
        return self._finish(*attend(q, k, v, mask, need_weights=need_weights))


class IndexedSparseAttention(_Projections):
    """Causal self-attention over each query's ``top_k`` tokens by a :class:`LightningIndexer`.

    One choice per query, shared by all heads (as DeepSeek's sparse attention shares it across
    the heads of its MQA-style attention). ``mode``:

    - ``"dense"``: plain causal attention; the indexer is unused;
    - ``"warmup"``: dense attention, and the indexer's loss (KL to the heads' summed weights,
      every earlier key) is kept in ``self.indexer_loss``; freeze the rest of the model;
    - ``"sparse"``: attention over the indexer's top_k only; the loss is the KL on the chosen
      keys, and the indexer sees a detached input, so the language loss trains the attention and
      the KL trains the indexer;
    - ``"exact"``: attention over the top_k keys of the dense attention itself (heads summed),
      the reference a perfect indexer would aim at (not an upper bound on accuracy); no
      indexer loss.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, top_k: int, indexer_heads: int, indexer_dim: int
    ):
        super().__init__(d_model, n_heads)
        check_int("top_k", top_k)
        self.top_k = top_k
        self.indexer = LightningIndexer(d_model, indexer_heads, indexer_dim)
        self.mode = "dense"
        self.indexer_loss: Tensor | None = None

    def select(self, x: Tensor) -> Tensor:
        """Each query's chosen tokens, (B, 1, T, top_k), -1 = none (early queries)."""
        scores = self.indexer(x.detach())  # (B, T, S)
        return topk_tokens(scores, min(self.top_k, x.size(1)))[:, None]  # (B, 1, T, top_k)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {self.mode!r}")
        q, k, v = self._heads(x)  # (B, H, T, d_head) each
        self.indexer_loss = None
        if self.mode == "dense":
            return self._finish(*attend(q, k, v, is_causal=True, need_weights=need_weights))
        if self.mode == "warmup":
            heads, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
            scores = self.indexer(x.detach())  # (B, T, S)
            self.indexer_loss = indexer_kl_loss(scores, dense_target(weights.detach()))
            return self._finish(heads, weights if need_weights else None)
        with torch.no_grad():
            dense = scaled_dot_product_attention(q, k, v, is_causal=True)[1]  # (B, H, T, S)
        # (B, T, S): the indexer's scores, or ("exact") the log of the heads' summed dense
        # weights, -inf on the future keys (weight 0)
        exact = self.mode == "exact"
        scores = dense_target(dense).log() if exact else self.indexer(x.detach())
        indices = topk_tokens(scores, min(self.top_k, x.size(1)))[:, None]  # (B, 1, T, k)
        chosen = selection_mask(indices, x.size(1))  # (B, 1, T, S)
        if self.mode == "sparse":
            self.indexer_loss = indexer_kl_loss(scores, dense_target(dense), chosen[:, 0])
        return self._finish(*attend(q, k, v, chosen, need_weights=need_weights))


class ChosenKeysAttention(_Projections):
    """Causal self-attention over the keys a rule ``choose(q, k, weights)`` marks: a probe.

    ``choose`` receives the heads' queries and keys (B, H, T, d_head) and the layer's dense
    causal weights (B, H, T, S, computed without gradient) and returns a boolean mask that
    broadcasts to (B, H, T, S), True = read. Loaded with a trained dense layer's weights, it
    measures what a selection rule costs that model with no training at all.
    """

    def __init__(self, d_model: int, n_heads: int, choose):
        super().__init__(d_model, n_heads)
        if not callable(choose):
            raise ValueError(f"choose: expected a callable, got {type(choose).__name__}")
        self.choose = choose

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        q, k, v = self._heads(x)  # (B, H, T, d_head) each
        with torch.no_grad():
            dense = scaled_dot_product_attention(q, k, v, is_causal=True)[1]  # (B, H, T, S)
            mask = self.choose(q, k, dense)  # broadcasts to (B, H, T, S)
        return self._finish(*attend(q, k, v, mask, need_weights=need_weights))
