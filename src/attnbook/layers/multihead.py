"""Multi-head, grouped-query and multi-query attention as one module, optionally with RoPE."""

import torch
from torch import Tensor, nn

from attnbook.core._checks import (
    check_base,
    check_bool,
    check_cached_attention_mask,
    check_choice,
    check_head_counts,
    check_head_mask,
    check_int,
    check_model_input,
    check_positive,
    check_probability,
    check_same_dtype,
    shape_of,
)
from attnbook.core.attention import attend
from attnbook.core.heads import gate_heads, merge_heads, repeat_kv, split_heads
from attnbook.core.kv_cache import KVCache, RollingKVCache
from attnbook.core.masks import causal_over_cache, sliding_window_mask
from attnbook.core.positions import ROPE_LAYOUTS, apply_rope
from attnbook.core.trace import record
from attnbook.layers.sinks import attention_with_sinks


def _describe(names: tuple[str, ...], values: tuple) -> str:
    return ", ".join(f"{name} = {value}" for name, value in zip(names, values, strict=True))


def _check_rope_settings(d_model: int, n_heads: int, key_dim: int, value_dim: int) -> None:
    """rope=True needs pairs of features in every head, and keys from the query's own tokens."""
    if (d_model // n_heads) % 2:
        raise ValueError(
            f"rope: rotary features come in pairs, so d_head = d_model / n_heads must be even, "
            f"got d_head = {d_model // n_heads} (d_model = {d_model}, n_heads = {n_heads})"
        )
    for name, width in (("key_dim", key_dim), ("value_dim", value_dim)):
        if width != d_model:
            raise ValueError(
                f"{name}: rope=True needs self-attention (keys and values from the query's "
                f"tokens), so {name} must equal d_model = {d_model}, got {width}"
            )


QK_NORM_EPS = 1e-6  # Qwen3's and OLMo 2's RMSNorm epsilon


def _check_modern_options(
    window: object,
    output_gate: object,
    qk_norm: object,
    logit_softcap: object,
    sinks: object,
    dropout: float,
) -> None:
    """The options of today's models: types, ranges, and which ones do not combine."""
    if window is not None:
        check_int("window", window)
    check_bool("output_gate", output_gate)
    check_bool("qk_norm", qk_norm)
    check_bool("sinks", sinks)
    if logit_softcap is not None:
        check_positive("logit_softcap", logit_softcap)
    if sinks and logit_softcap is not None:
        raise ValueError(
            f"logit_softcap: not supported together with sinks=True, got {logit_softcap!r}"
        )
    if sinks and dropout > 0:
        raise ValueError(f"dropout: not supported together with sinks=True, got {dropout!r}")


class GroupedQueryAttention(nn.Module):
    """Attention with H query heads sharing H_kv key/value heads (Ainslie et al., 2023).

    ``n_kv_heads == n_heads`` is multi-head attention, ``n_kv_heads == 1`` multi-query attention.
    Query head h reads key/value head ``h // (n_heads // n_kv_heads)``.

    ``forward(query, key=None, value=None, *, mask=None, is_causal=False, need_weights=False)``
    takes query (B, T, D), key (B, S, key_dim) and value (B, S, value_dim); with key and value
    left out it is self-attention (key = value = query), with key alone value = key. ``mask``
    follows :func:`attnbook.scaled_dot_product_attention` (bool True = attend, or float added)
    and must broadcast to (B, H, T, S). Returns (output (B, T, D), weights (B, H, T, S) or None).
    Without ``need_weights`` it calls PyTorch's fused ``F.scaled_dot_product_attention``, which
    never materialises the weights; with it, the library's explicit version. Both agree.

    ``key_dim`` and ``value_dim`` (default: d_model) are the widths of the key and value inputs,
    as ``kdim`` and ``vdim`` in ``nn.MultiheadAttention``: a decoder of width D attending to an
    encoder of another width. Only the projections read them: ``k_proj`` maps key_dim and
    ``v_proj`` value_dim features to H_kv * d_head; the heads, the weights (B, H, T, S) and the
    output (B, T, D) are as before. Where a width differs, the default key = query (or
    value = key) cannot work, so key (and value) must be passed.

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
    are cached already rotated. ``d_model / n_heads`` must then be even, key_dim and value_dim
    must be d_model, and key and value must be left out (query and key positions are only
    defined when they are the same tokens).

    Options of today's open models, all off by default (see chapter 15):

    * ``window``: a sliding-window layer (Mistral, Gemma's local layers): each query sees its
      last ``window`` keys, itself included (:func:`attnbook.sliding_window_mask`). It is
      causal, so it must be called with ``is_causal=True``; ``new_cache()`` then returns a
      :class:`attnbook.RollingKVCache` that holds only ``window`` positions.
    * ``output_gate``: gated attention (Qiu et al., 2025; Qwen3-Next): every head's output is
      multiplied, feature by feature, by sigmoid(gate_proj(query)) before the heads are merged,
      a gate computed from the layer's own input.
    * ``qk_norm``: QK-norm (OLMo 2, Gemma 3, Qwen3): each query and key head is RMS-normalised
      over its d_head features, with a learned scale per feature (``q_norm``, ``k_norm``),
      before the rotary embedding.
    * ``logit_softcap``: soft-capping (Gemma 2): scores become c * tanh(score / c), so no score
      leaves (-c, c). PyTorch's fused kernel has no such option: the explicit path runs.
    * ``sinks``: a learned sink logit per query head (gpt-oss), ``self.sinks`` (H,), initialised
      to 0 (:func:`attnbook.attention_with_sinks`); not with dropout or ``logit_softcap``.
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
        key_dim: int | None = None,
        value_dim: int | None = None,
        window: int | None = None,
        output_gate: bool = False,
        qk_norm: bool = False,
        logit_softcap: float | None = None,
        sinks: bool = False,
    ) -> None:
        super().__init__()
        check_head_counts(d_model, n_heads, n_kv_heads)
        _check_modern_options(window, output_gate, qk_norm, logit_softcap, sinks, dropout)
        key_dim = d_model if key_dim is None else key_dim
        value_dim = d_model if value_dim is None else value_dim
        check_int("key_dim", key_dim)
        check_int("value_dim", value_dim)
        check_probability("dropout", dropout)
        check_choice("rope_layout", rope_layout, ROPE_LAYOUTS)
        check_base("rope_base", rope_base)
        if rope:
            _check_rope_settings(d_model, n_heads, key_dim, value_dim)
        self.rope = rope
        self.rope_base = rope_base
        self.rope_layout = rope_layout
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(key_dim, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(value_dim, n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.window = window
        self.logit_softcap = logit_softcap
        self.gate_proj = nn.Linear(d_model, d_model, bias=bias) if output_gate else None
        self.q_norm = nn.RMSNorm(self.head_dim, eps=QK_NORM_EPS) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=QK_NORM_EPS) if qk_norm else None
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sinks else None

    def new_cache(self) -> KVCache:
        """An empty cache for this layer, to pass as ``cache`` when decoding.

        A :class:`attnbook.KVCache`, or for a sliding-window layer a
        :class:`attnbook.RollingKVCache` that holds only the last ``window`` positions.
        """
        return KVCache() if self.window is None else RollingKVCache(self.window)

    def _expected_layout(self, name: str) -> tuple[str, int, str]:
        """The layout, width and width's name expected of ``name``: query, key or value."""
        length = "T" if name == "query" else "S"
        width = {"query": self.d_model, "key": self.key_dim, "value": self.value_dim}[name]
        if width == self.d_model:
            return f"(B, {length}, D)", width, "D = d_model"
        return f"(B, {length}, {name}_dim)", width, f"{name}_dim"

    def _default_key_value(
        self, query: Tensor, key: Tensor | None, value: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Key and value, defaulting to key = query and value = key where the widths allow."""
        if key is None and value is not None:
            raise ValueError("key: got value but no key; pass both for cross-attention")
        if self.rope and key is not None:
            raise ValueError(
                "key: this layer has a rotary embedding (rope=True), which needs self-attention; "
                "leave key and value out"
            )
        if key is None and self.key_dim != self.d_model:
            raise ValueError(
                f"key: expected a key of shape (B, S, key_dim) with key_dim = {self.key_dim}; "
                f"the queries' width d_model = {self.d_model} differs, so key = query cannot "
                f"work: pass key and value"
            )
        if value is None and self.value_dim != self.key_dim:
            raise ValueError(
                f"value: expected a value of shape (B, S, value_dim) with value_dim = "
                f"{self.value_dim}; the keys' width key_dim = {self.key_dim} differs, so "
                f"value = key cannot work: pass value (and key)"
            )
        key = query if key is None else key
        return key, key if value is None else value

    def _check_inputs(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
    ) -> None:
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            check_model_input(name, tensor, *self._expected_layout(name))
            if tensor.size(0) != query.size(0):
                raise ValueError(
                    f"{name}: batch size {tensor.size(0)} must equal query's {query.size(0)}; got "
                    f"{name}.shape = {shape_of(tensor)}, query.shape = {shape_of(query)}"
                )
            check_same_dtype(name, tensor, query, "query")
        if value.size(1) != key.size(1):
            raise ValueError(
                f"value: expected shape {self._expected_layout('value')[0]} with S = "
                f"{key.size(1)} as in key, got value.shape = {shape_of(value)}"
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
        key, value = self._default_key_value(query, key, value)
        self._check_inputs(query, key, value, mask, is_causal, cache)
        self._check_window_call(is_causal, cache)
        check_head_mask(head_mask, query.size(0), self.n_heads, query.dtype)

        q = split_heads(self.q_proj(query), self.n_heads)  # (B, H, T, d_head)
        # keys (B, S, key_dim) and values (B, S, value_dim) are projected to H_kv heads
        k = split_heads(self.k_proj(key), self.n_kv_heads)  # (B, H_kv, S, d_head)
        v = split_heads(self.v_proj(value), self.n_kv_heads)  # (B, H_kv, S, d_head)
        record("q", q, "B H T d_head", "queries, projected and split into heads")
        # with a cache these are the T new positions only; the cache then holds all S
        kv_len, new = ("S", "") if cache is None else ("T", "new positions' ")
        record("k", k, f"B H_kv {kv_len} d_head", f"{new}keys, one per key/value head")
        record("v", v, f"B H_kv {kv_len} d_head", f"{new}values, one per key/value head")
        if self.q_norm is not None:
            q, k = self._normalise(q, k)  # shapes unchanged
        if self.rope:
            q, k = self._rotate(q, k, 0 if cache is None else len(cache))  # shapes unchanged
        if cache is not None:
            k, v = self._extend_cache(cache, k, v)  # (B, H_kv, S, d_head): cached and new
        if self.window is not None:
            mask = sliding_window_mask(q.size(2), self.window, k.size(2), device=q.device)
            is_causal = False  # the (T, S) window mask is causal itself
        elif cache is not None:
            mask, is_causal = causal_over_cache(mask, is_causal, q.size(2), k.size(2), q.device)

        heads, weights = self._attend(q, k, v, mask, is_causal, need_weights)
        if self.gate_proj is not None:
            heads = self._gate(heads, query)  # (B, H, T, d_head)
        heads = gate_heads(heads, head_mask)  # (B, H, T, d_head)
        merged = merge_heads(heads)  # (B, T, D)
        record("merged", merged, "B T D", "heads concatenated back to model width")
        output = self.out_proj(merged)  # (B, T, D)
        record("output", output, "B T D", "output projection")
        return output, weights

    def _check_window_call(self, is_causal: bool, cache: KVCache | None) -> None:
        """A sliding-window layer is causal, and a rolling cache holds at least its window."""
        if self.window is not None and not is_causal:
            raise ValueError(
                f"is_causal: this layer has a sliding window (window = {self.window}), which is "
                f"a causal mask; call it with is_causal=True and no mask"
            )
        if isinstance(cache, RollingKVCache) and (
            self.window is None or cache.window < self.window
        ):
            raise ValueError(
                f"cache: a RollingKVCache of window {cache.window} holds too few positions for "
                f"this layer (window = {self.window}); use the layer's new_cache()"
            )

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask, is_causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Plain (optionally soft-capped) attention, or attention with the learned sinks."""
        if self.sinks is None:
            dropout_p = self.dropout if self.training else 0.0
            return attend(
                q,
                k,
                v,
                mask,
                is_causal=is_causal,
                dropout_p=dropout_p,
                need_weights=need_weights,
                logit_softcap=self.logit_softcap,
            )  # (B, H, T, d_head), (B, H, T, S) or None
        group_size = q.size(1) // k.size(1)
        k = repeat_kv(k, group_size)  # (B, H, S, d_head)
        v = repeat_kv(v, group_size)  # (B, H, S, d_head)
        heads, weights = attention_with_sinks(
            q, k, v, self.sinks, mask=mask, is_causal=is_causal
        )  # (B, H, T, d_head), (B, H, T, S)
        return heads, weights if need_weights else None

    def _normalise(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """QK-norm: RMS-normalise every query and key head over its d_head features."""
        q = self.q_norm(q)  # (B, H, T, d_head)
        k = self.k_norm(k)  # (B, H_kv, S, d_head)
        record("q normed", q, "B H T d_head", "queries with RMS 1 per head, times a learned scale")
        record("k normed", k, "B H_kv S d_head", "keys with RMS 1 per head, times a learned scale")
        return q, k

    def _gate(self, heads: Tensor, query: Tensor) -> Tensor:
        """Gated attention: heads (B, H, T, d_head) times sigmoid of a projection of the input."""
        gate = torch.sigmoid(split_heads(self.gate_proj(query), self.n_heads))  # (B, H, T, d_head)
        record("gate", gate, "B H T d_head", "sigmoid(gate_proj(x)): in (0, 1), per feature")
        return heads * gate  # (B, H, T, d_head)

    def _rotate(self, q: Tensor, k: Tensor, past: int) -> tuple[Tensor, Tensor]:
        """Rotate queries (B, H, T, d_head) and keys (B, H_kv, S = T, d_head) from position past."""
        positions = torch.arange(past, past + q.size(2), device=q.device)  # (T,)
        q = apply_rope(q, positions, self.rope_base, layout=self.rope_layout)  # (B, H, T, d_head)
        k = apply_rope(k, positions, self.rope_base, layout=self.rope_layout)  # (B, H_kv, T, dh)
        record("q rotated", q, "B H T d_head", "queries rotated at their positions")
        record("k rotated", k, "B H_kv S d_head", "keys rotated at their positions")
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
    for the forward signature and shapes, and for the options of today's models (``window``,
    ``output_gate``, ``qk_norm``, ``logit_softcap``, ``sinks``), passed on unchanged.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        key_dim: int | None = None,
        value_dim: int | None = None,
        window: int | None = None,
        output_gate: bool = False,
        qk_norm: bool = False,
        logit_softcap: float | None = None,
        sinks: bool = False,
    ) -> None:
        super().__init__(
            d_model,
            n_heads,
            n_heads,
            bias=bias,
            dropout=dropout,
            key_dim=key_dim,
            value_dim=value_dim,
            window=window,
            output_gate=output_gate,
            qk_norm=qk_norm,
            logit_softcap=logit_softcap,
            sinks=sinks,
        )

    def copy_weights_from(self, torch_mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Load the projections of a ``torch.nn.MultiheadAttention`` with the same sizes.

        PyTorch stacks W_q, W_k and W_v into one ``in_proj_weight`` of shape (3D, D) whose three
        row blocks are our three projections; with kdim or vdim other than D it keeps them apart
        as ``q_proj_weight`` (D, D), ``k_proj_weight`` (D, key_dim) and ``v_proj_weight``
        (D, value_dim). The biases are always stacked in ``in_proj_bias`` (3D,). Returns ``self``.
        """
        if not isinstance(torch_mha, nn.MultiheadAttention):
            raise ValueError(
                f"torch_mha: expected a torch.nn.MultiheadAttention, got {type(torch_mha).__name__}"
            )
        names = ("embed_dim", "num_heads", "kdim", "vdim", "bias", "extra key/value")
        has_bias = self.q_proj.bias is not None
        expected = (self.d_model, self.n_heads, self.key_dim, self.value_dim, has_bias, False)
        got = (
            torch_mha.embed_dim,
            torch_mha.num_heads,
            torch_mha.kdim,
            torch_mha.vdim,
            torch_mha.in_proj_bias is not None,
            torch_mha.bias_k is not None or torch_mha.add_zero_attn,  # not in our module
        )
        if got != expected:
            raise ValueError(
                f"torch_mha: expected {_describe(names, expected)}; got {_describe(names, got)}"
            )
        if torch_mha.in_proj_weight is not None:
            weights = torch_mha.in_proj_weight.chunk(3)  # 3 x (D, D)
        else:
            weights = (torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight)
        biases = (None,) * 3 if torch_mha.in_proj_bias is None else torch_mha.in_proj_bias.chunk(3)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        with torch.no_grad():
            for projection, weight, bias in zip(projections, weights, biases, strict=True):
                projection.weight.copy_(weight)
                if bias is not None:
                    projection.bias.copy_(bias)
            self.out_proj.load_state_dict(torch_mha.out_proj.state_dict())
        return self
