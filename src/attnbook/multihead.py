"""Multi-head, grouped-query and multi-query attention as one module, optionally with RoPE."""

import torch
from torch import Tensor, nn

from attnbook._checks import (
    check_cached_attention_mask,
    check_choice,
    check_head_counts,
    check_head_mask,
    check_model_input,
    check_positive,
    check_probability,
    check_same_dtype,
    shape_of,
)
from attnbook.attention import attend
from attnbook.heads import gate_heads, merge_heads, split_heads
from attnbook.kv_cache import KVCache
from attnbook.masks import causal_over_cache
from attnbook.positions import ROPE_LAYOUTS, apply_rope
from attnbook.trace import record


def _describe(names: tuple[str, ...], values: tuple) -> str:
    return ", ".join(f"{name} = {value}" for name, value in zip(names, values, strict=True))


class GroupedQueryAttention(nn.Module):
    """Attention with H query heads sharing H_kv key/value heads (Ainslie et al., 2023).

    ``n_kv_heads == n_heads`` is multi-head attention, ``n_kv_heads == 1`` multi-query attention.
    Query head h reads key/value head ``h // (n_heads // n_kv_heads)``.

    ``forward(query, key=None, value=None, *, mask=None, is_causal=False, need_weights=False)``
    takes query (B, T, D) and key, value (B, S, D); with key and value left out it is
    self-attention (key = value = query), with key alone value = key. ``mask`` follows
    :func:`attnbook.scaled_dot_product_attention` (bool True = attend, or float added) and must
    broadcast to (B, H, T, S). Returns (output (B, T, D), weights (B, H, T, S) or None).
    Without ``need_weights`` it calls PyTorch's fused ``F.scaled_dot_product_attention``, which
    never materialises the weights; with it, the library's explicit version. Both agree.

    ``cache``: a :class:`attnbook.KVCache` for decoding. The new keys and values are appended to
    it and the T queries attend over all S cached positions, so S counts the cached ones too
    (a ``mask`` must broadcast to that S). With ``is_causal`` the queries are taken to be the
    *last* T positions: the mask is ``causal_mask(T, S, align="bottom-right")``.

    ``head_mask``: (H,) or (B, H) floats in the inputs' dtype, multiplying each query head's
    output before the heads are merged (Michel et al.'s gates; see :func:`attnbook.gate_heads`).
    With grouped key/value heads a gate acts on one *query* head: the key/value head it reads
    still serves the other query heads of its group, so removing a key/value head means gating
    every query head of its group.

    ``rope=True`` adds a rotary position embedding (:func:`attnbook.apply_rope`, Su et al.,
    2021) to self-attention: after the projections, every query and key head is rotated at its
    position with ``rope_base`` as the base of the frequencies and ``rope_layout`` as the
    feature pairing, ``"halves"`` (GPT-NeoX, Llama; the default) or ``"adjacent"`` (RoFormer,
    GPT-J). With a cache the T new tokens are at positions ``len(cache)`` onward, and the keys
    are cached already rotated. ``d_model / n_heads`` must then be even, and key and value must
    be left out (query and key positions are only defined when they are the same tokens).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        rope: bool = False,
        rope_base: float = 10000.0,
        rope_layout: str = "halves",
    ) -> None:
        super().__init__()
        check_head_counts(d_model, n_heads, n_kv_heads)
        check_probability("dropout", dropout)
        check_choice("rope_layout", rope_layout, ROPE_LAYOUTS)
        check_positive("rope_base", rope_base)
        if rope and (d_model // n_heads) % 2:
            raise ValueError(
                f"rope: rotary features come in pairs, so d_head = d_model / n_heads must be even, "
                f"got d_head = {d_model // n_heads} (d_model = {d_model}, n_heads = {n_heads})"
            )
        self.rope = rope
        self.rope_base = rope_base
        self.rope_layout = rope_layout
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def new_cache(self) -> KVCache:
        """An empty :class:`attnbook.KVCache` for this layer, to pass as ``cache`` when decoding."""
        return KVCache()

    def _check_inputs(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
    ) -> None:
        layouts = {"query": "(B, T, D)", "key": "(B, S, D)", "value": "(B, S, D)"}
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            check_model_input(name, tensor, layouts[name], self.d_model)
            if tensor.size(0) != query.size(0):
                raise ValueError(
                    f"{name}: batch size {tensor.size(0)} must equal query's {query.size(0)}; got "
                    f"{name}.shape = {shape_of(tensor)}, query.shape = {shape_of(query)}"
                )
            check_same_dtype(name, tensor, query, "query")
        if value.size(1) != key.size(1):
            raise ValueError(
                f"value: expected shape (B, S, D) with S = {key.size(1)} as in key, got "
                f"value.shape = {shape_of(value)}"
            )
        new_scores_shape = (query.size(0), self.n_heads, query.size(1), key.size(1))
        check_cached_attention_mask(mask, is_causal, cache, KVCache, new_scores_shape)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        if key is None and value is not None:
            raise ValueError("key: got value but no key; pass both for cross-attention")
        if self.rope and key is not None:
            raise ValueError(
                "key: this layer has a rotary embedding (rope=True), which needs self-attention; "
                "leave key and value out"
            )
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, mask, is_causal, cache)
        check_head_mask(head_mask, query.size(0), self.n_heads, query.dtype)

        q = split_heads(self.q_proj(query), self.n_heads)  # (B, H, T, d_head)
        k = split_heads(self.k_proj(key), self.n_kv_heads)  # (B, H_kv, S, d_head)
        v = split_heads(self.v_proj(value), self.n_kv_heads)  # (B, H_kv, S, d_head)
        record("q", q, "B H T d_head", "queries, projected and split into heads")
        record("k", k, "B H_kv S d_head", "keys, one per key/value head")
        record("v", v, "B H_kv S d_head", "values, one per key/value head")
        if self.rope:
            q, k = self._rotate(q, k, 0 if cache is None else len(cache))  # shapes unchanged
        if cache is not None:
            k, v = self._extend_cache(cache, k, v)  # (B, H_kv, S, d_head): cached and new
            mask, is_causal = causal_over_cache(mask, is_causal, q.size(2), k.size(2), q.device)

        dropout_p = self.dropout if self.training else 0.0
        heads, weights = attend(
            q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p, need_weights=need_weights
        )  # (B, H, T, d_head), (B, H, T, S) or None
        heads = gate_heads(heads, head_mask)  # (B, H, T, d_head)
        merged = merge_heads(heads)  # (B, T, D)
        record("merged", merged, "B T D", "heads concatenated back to model width")
        output = self.out_proj(merged)  # (B, T, D)
        record("output", output, "B T D", "output projection")
        return output, weights

    def _rotate(self, q: Tensor, k: Tensor, past: int) -> tuple[Tensor, Tensor]:
        """Rotate queries (B, H, T, d_head) and keys (B, H_kv, T, d_head) at past + arange(T)."""
        positions = torch.arange(past, past + q.size(2), device=q.device)  # (T,)
        q = apply_rope(q, positions, self.rope_base, layout=self.rope_layout)  # (B, H, T, d_head)
        k = apply_rope(k, positions, self.rope_base, layout=self.rope_layout)  # (B, H_kv, T, dh)
        record("q rotated", q, "B H T d_head", "queries rotated at their positions")
        record("k rotated", k, "B H_kv T d_head", "keys rotated at their positions")
        return q, k

    def _extend_cache(self, cache: KVCache, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new keys and values (B, H_kv, T, d_head) and return all S cached ones."""
        k, v = cache.append(k, v)  # (B, H_kv, S, d_head)
        record("k cache", k, "B H_kv S d_head", "cached keys: every position so far")
        record("v cache", v, "B H_kv S d_head", "cached values: every position so far")
        return k, v


class MultiHeadAttention(GroupedQueryAttention):
    """Multi-head attention (Vaswani et al., 2017): every query head has its own key/value head.

    The same module as :class:`GroupedQueryAttention` with ``n_kv_heads == n_heads``; see there
    for the forward signature and shapes.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, bias: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__(d_model, n_heads, n_heads, bias=bias, dropout=dropout)

    def copy_weights_from(self, torch_mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Load the projections of a ``torch.nn.MultiheadAttention`` with the same sizes.

        PyTorch stacks W_q, W_k and W_v into one ``in_proj_weight`` of shape (3D, D); the three
        row blocks are our three projections. Returns ``self``.
        """
        if not isinstance(torch_mha, nn.MultiheadAttention):
            raise ValueError(
                f"torch_mha: expected a torch.nn.MultiheadAttention, got {type(torch_mha).__name__}"
            )
        names = ("embed_dim", "num_heads", "packed in_proj_weight", "bias", "extra key/value")
        expected = (self.d_model, self.n_heads, True, self.q_proj.bias is not None, False)
        got = (
            torch_mha.embed_dim,
            torch_mha.num_heads,
            torch_mha.in_proj_weight is not None,  # False when kdim or vdim differ from D
            torch_mha.in_proj_bias is not None,
            torch_mha.bias_k is not None or torch_mha.add_zero_attn,  # not in our module
        )
        if got != expected:
            raise ValueError(
                f"torch_mha: expected {_describe(names, expected)}; got {_describe(names, got)}"
            )
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weights = torch_mha.in_proj_weight.detach().chunk(3)  # 3 x (D, D)
        biases = (
            torch_mha.in_proj_bias.detach().chunk(3)
            if torch_mha.in_proj_bias is not None
            else (None,) * 3
        )
        for projection, weight, bias in zip(projections, weights, biases, strict=True):
            projection.weight.data.copy_(weight)
            if bias is not None:
                projection.bias.data.copy_(bias)
        self.out_proj.weight.data.copy_(torch_mha.out_proj.weight.detach())
        if self.out_proj.bias is not None:
            self.out_proj.bias.data.copy_(torch_mha.out_proj.bias.detach())
        return self
