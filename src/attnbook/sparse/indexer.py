"""DeepSeek's lightning indexer (DeepSeek-AI, 2025): a cheap scorer that picks each query's keys.

For query token t and earlier token s the index score is

    I[t, s] = sum_j w[t, j] * ReLU(q[t, j] . k[s])

over a few indexer heads j, with q[t, j] and the weight w[t, j] made from token t and one key
k[s] per token, shared by the heads. ReLU (not a softmax) keeps it cheap; DeepSeek also runs
it in FP8. Each query then keeps its ``top_k`` highest-scoring tokens (:func:`topk_tokens`) and
the main attention reads only those. Before sparse training the indexer is warmed up to match
the dense attention's distribution over keys (:func:`indexer_kl_loss`), with the main model
frozen; :func:`topk_recall` measures how much of the dense top k it finds.
"""

import math

import torch
from torch import Tensor, nn

from attnbook.core._checks import check_int, check_model_input, check_tensor, shape_of
from attnbook.core.masks import causal_mask
from attnbook.sparse._inputs import check_top_k
from attnbook.sparse.topk import NO_KEY


class LightningIndexer(nn.Module):
    """Index scores (B, T, S = T) for causal self-attention; future keys score -inf.

    ``n_heads`` indexer heads of width ``head_dim`` (DeepSeek-V3.2-Exp: 64 heads of 128, with a
    128-head main attention); one indexer key per token, shared by the heads. Scores are scaled
    by 1 / sqrt(head_dim), which does not change any top k but keeps the warm-up's softmax tame.
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("head_dim", head_dim)):
            check_int(name, value)
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, head_dim
        self.q_proj = nn.Linear(d_model, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, head_dim, bias=False)
        self.w_proj = nn.Linear(d_model, n_heads, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        check_model_input("x", x, "(B, T, D)", self.d_model)
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.n_heads, self.head_dim)  # (B, T, H_I, d_I)
        k = self.k_proj(x)  # (B, S, d_I): one key per token
        w = self.w_proj(x)  # (B, T, H_I): how much each indexer head counts for query t
        dots = torch.einsum("bthd,bsd->bths", q, k) / math.sqrt(self.head_dim)  # (B, T, H_I, S)
        scores = (w[..., None] * dots.relu()).sum(2)  # (B, T, S)
        causal = causal_mask(length, device=x.device)  # (T, S)
        return scores.masked_fill(~causal, float("-inf"))  # (B, T, S)


def topk_tokens(scores: Tensor, top_k: int) -> Tensor:
    """Each query's ``top_k`` highest-scoring keys: (B, T, S) -> (B, T, top_k), -1 = none.

    Keys scoring -inf (the future) are never chosen, so early queries with fewer than top_k
    earlier tokens get -1 in their spare slots.
    """
    check_tensor("scores", scores, "(B, T, S)", rank=3)
    check_top_k("top_k", top_k, scores.size(-1), "keys")
    best = scores.topk(top_k, dim=-1)  # (B, T, top_k)
    return torch.where(best.values > float("-inf"), best.indices, NO_KEY)


def dense_target(weights: Tensor) -> Tensor:
    """The warm-up's target: the main attention's weights summed over heads, renormalised.

    (B, H, T, S) -> (B, T, S), each row a distribution over keys (as DeepSeek's indexer target).
    """
    check_tensor("weights", weights, "(B, H, T, S)", rank=4)
    total = weights.sum(1)  # (B, T, S)
    return total / total.sum(-1, keepdim=True).clamp_min(torch.finfo(total.dtype).tiny)


def indexer_kl_loss(scores: Tensor, target: Tensor, selected: Tensor | None = None) -> Tensor:
    """Mean over queries of KL(target || softmax(scores)), a scalar.

    scores (B, T, S) from the indexer (-inf = not a key); target (B, T, S) from
    :func:`dense_target`, treated as a constant. ``selected`` (B, T, S) boolean restricts both
    to the chosen keys (the sparse stage, where the target is renormalised over them); None
    uses every key the scores allow (the dense warm-up). Keys outside contribute nothing.
    """
    check_tensor("scores", scores, "(B, T, S)", rank=3)
    if target.shape != scores.shape:
        raise ValueError(
            f"target: expected the scores' shape {shape_of(scores)}, got {shape_of(target)}"
        )
    allowed = scores > float("-inf")  # (B, T, S)
    if selected is not None:
        if selected.shape != scores.shape or selected.dtype != torch.bool:
            raise ValueError(
                f"selected: expected a bool tensor of shape {shape_of(scores)}, got "
                f"{selected.dtype} {shape_of(selected)}"
            )
        allowed = allowed & selected
    target = torch.where(allowed, target.detach(), 0.0)  # (B, T, S)
    target = target / target.sum(-1, keepdim=True).clamp_min(torch.finfo(target.dtype).tiny)
    log_q = scores.masked_fill(~allowed, float("-inf")).log_softmax(-1)  # (B, T, S)
    keep = allowed & (target > 0)  # where the target has mass
    per_key = torch.where(keep, target * (target.clamp_min(1e-30).log() - log_q), 0.0)
    return per_key.sum(-1).mean()


def topk_recall(indices: Tensor, target: Tensor, top_k: int) -> Tensor:
    """Per query, the share of the dense top ``top_k`` keys that ``indices`` also picked.

    indices (B, T, k) from :func:`topk_tokens`; target (B, T, S) dense weights. Queries with
    fewer than ``top_k`` earlier keys (which every method reads whole) are left out: returns the
    recalls (n,) of the remaining queries.
    """
    check_tensor("indices", indices, "(B, T, k)", rank=3)
    check_int("top_k", top_k)
    dense_best = target.topk(top_k, dim=-1).indices  # (B, T, top_k)
    hits = (dense_best[..., :, None] == indices[..., None, :]).any(-1)  # (B, T, top_k)
    has_more = torch.arange(target.size(1), device=target.device) >= top_k  # (T,)
    return hits.float().mean(-1)[:, has_more].flatten()  # (n,)
