"""Native Sparse Attention (Yuan et al., 2025), a teaching version: three branches and gates.

Each query reads the keys through three branches and mixes their outputs with learned gates:

- **compressed**: every complete block of ``block_size`` keys is summarised into one key and one
  value (here a learned weighted mean over the block's positions; NSA uses a small MLP with a
  position encoding inside the block), and the query attends to the summaries of the blocks
  that end at or before it;
- **selected**: the compressed branch's attention weights rank the blocks; the query reads the
  ``top_n`` best blocks' tokens in full (its own block always, causally);
- **sliding**: the last ``window`` tokens.

The output is ``sum_c sigmoid(gate_c(x)) * branch_c``, one gate per branch and head. Simplified
from the paper: one block size for compression and selection, compression blocks that do not
overlap (the paper's case l = d = l', where the selection scores are the compression weights
themselves), one set of keys and values shared by the branches (the paper gives each
branch its own), and one block choice for all heads (the paper shares it within a GQA group).
"""

import math

import torch
from torch import Tensor, nn

from attnbook.core._checks import check_int, check_model_input
from attnbook.core.attention import scaled_dot_product_attention
from attnbook.core.heads import merge_heads, split_heads
from attnbook.core.masks import sliding_window_mask
from attnbook.sparse._inputs import check_block_size, check_top_k
from attnbook.sparse.moba import block_keys
from attnbook.sparse.topk import NO_KEY, selection_mask, topk_attention

BRANCHES = ("compressed", "selected", "sliding")


def compress(x: Tensor, block_size: int, position_weights: Tensor) -> Tensor:
    """One summary per complete block: (B, H, S, d) -> (B, H, S // block_size, d).

    ``position_weights`` (block_size,) weighs the block's positions (uniform = the mean key).
    """
    batch, n_heads, length, width = x.shape
    n_blocks = length // block_size
    blocks = x[:, :, : n_blocks * block_size].view(batch, n_heads, n_blocks, block_size, width)
    return torch.einsum("bhnpd,p->bhnd", blocks, position_weights.to(x.dtype))  # (B, H, n, d)


def compressed_mask(query_len: int, block_size: int, device=None) -> Tensor:
    """(T, n_blocks): query t may read block j's summary once the block is complete (ends <= t)."""
    n_blocks = query_len // block_size
    block_end = torch.arange(1, n_blocks + 1, device=device) * block_size - 1  # (n,)
    return block_end[None] <= torch.arange(query_len, device=device)[:, None]  # (T, n)


def compressed_attention(
    q: Tensor, k_cmp: Tensor, v_cmp: Tensor, block_size: int, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Attention over the block summaries: (output (B, H, T, d_v), weights (B, H, T, n_blocks)).

    A query before the first complete block reads nothing: zero output and zero weights.
    """
    mask = compressed_mask(q.size(2), block_size, q.device)  # (T, n)
    return scaled_dot_product_attention(q, k_cmp, v_cmp, mask, scale=scale)


def select_blocks(block_weights: Tensor, block_size: int, top_n: int) -> Tensor:
    """Each query's ``top_n`` blocks, own block first: (B, H, T, n_cmp) -> (B, H, T, top_n).

    block_weights: the compressed branch's weights (complete earlier blocks only), summed over
    all heads so that every head of a query reads the same blocks. NSA shares a choice only
    within a GQA group (heads that read the same keys); every head here has keys of its own, so
    this one choice for the whole layer is a simplification. The own block (incomplete, so
    without a summary) is always taken; -1 = none.
    """
    batch, n_heads, query_len, n_complete = block_weights.shape
    n_blocks = math.ceil(query_len / block_size)
    check_top_k("top_n", top_n, n_blocks, f"blocks of {block_size} in T = {query_len} tokens")
    score = block_weights.sum(1, keepdim=True)  # (B, 1, T, n_complete)
    padding = score.new_zeros(batch, 1, query_len, n_blocks - n_complete)
    score = torch.cat([score, padding], -1)  # (B, 1, T, n_blocks)
    own = torch.arange(query_len, device=score.device) // block_size  # (T,)
    block = torch.arange(n_blocks, device=score.device)  # (n_blocks,)
    score = score.masked_fill(block > own[:, None], float("-inf"))
    score = score.masked_fill(block == own[:, None], float("inf"))
    best = score.topk(top_n, dim=-1)  # (B, 1, T, top_n)
    chosen = torch.where(best.values > float("-inf"), best.indices, NO_KEY)
    return chosen.expand(-1, n_heads, -1, -1)  # (B, H, T, top_n)


def summarised_tokens(query_len: int, block_size: int, device=None) -> Tensor:
    """(T, S): the tokens inside the block summaries query t reads (its complete blocks)."""
    positions = torch.arange(query_len, device=device)  # (T,)
    complete = (positions + 1) // block_size  # (T,): complete blocks at query t
    return (positions[None] // block_size) < complete[:, None]  # (T, S)


class NativeSparseAttention(nn.Module):
    """Causal self-attention with NSA's three gated branches, at small sizes.

    ``block_size`` keys per compression and selection block, ``top_n`` selected blocks (own
    included), a sliding ``window`` of tokens. forward(x) -> (B, T, D). ``branches(x)`` returns
    each branch's output (B, H, T, d_head) and the gates (B, H, T, 3).
    """

    def __init__(self, d_model: int, n_heads: int, *, block_size: int, top_n: int, window: int):
        super().__init__()
        for name, value in (
            ("d_model", d_model),
            ("n_heads", n_heads),
            ("block_size", block_size),
            ("top_n", top_n),
            ("window", window),
        ):
            check_int(name, value)
        if d_model % n_heads:
            raise ValueError(f"n_heads: must divide d_model = {d_model}, got {n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.block_size, self.top_n, self.window = block_size, top_n, window
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.position_weights = nn.Parameter(torch.full((block_size,), 1.0 / block_size))
        self.gate_proj = nn.Linear(d_model, 3 * n_heads)

    def _check(self, x: Tensor) -> None:
        check_model_input("x", x, "(B, T, D)", self.d_model)
        check_block_size(self.block_size, x.size(1))
        check_top_k("top_n", self.top_n, math.ceil(x.size(1) / self.block_size), "blocks")

    def branches(self, x: Tensor) -> tuple[dict[str, Tensor], Tensor, dict[str, Tensor]]:
        """Each branch's output (B, H, T, d_head), the gates (B, H, T, 3), each branch's mask.

        Masks are (B, H, T, S); the compressed branch's marks the tokens its summaries cover.
        """
        self._check(x)
        batch, length, _ = x.shape
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        k_cmp = compress(k, self.block_size, self.position_weights)  # (B, H, n, d_head)
        v_cmp = compress(v, self.block_size, self.position_weights)  # (B, H, n, d_head)
        compressed, block_weights = compressed_attention(q, k_cmp, v_cmp, self.block_size)
        blocks = select_blocks(block_weights.detach(), self.block_size, self.top_n)
        indices = block_keys(blocks, self.block_size, length)  # (B, H, T, top_n * block_size)
        window = sliding_window_mask(length, self.window, device=x.device)  # (T, S)
        outputs = {
            "compressed": compressed,
            "selected": topk_attention(q, k, v, indices),
            "sliding": scaled_dot_product_attention(q, k, v, window)[0],
        }
        # (B, T, 3 H) -> (B, H, T, 3)
        gates = torch.sigmoid(self.gate_proj(x)).view(batch, length, 3, self.n_heads)
        gates = gates.permute(0, 3, 1, 2)
        masks = {
            "compressed": summarised_tokens(length, self.block_size).expand(
                batch, self.n_heads, -1, -1
            ),
            "selected": selection_mask(indices, length),
            "sliding": window.expand(batch, self.n_heads, -1, -1),
        }
        return outputs, gates, masks

    def forward(self, x: Tensor) -> Tensor:
        outputs, gates, _ = self.branches(x)
        mixed = sum(gates[..., i, None] * outputs[name] for i, name in enumerate(BRANCHES))
        return self.out_proj(merge_heads(mixed))  # (B, T, D)
