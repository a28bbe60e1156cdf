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
from attnbook.core.positions import ROPE_LAYOUTS, apply_rope, check_rope_scaling
from attnbook.core.trace import record
from attnbook.layers.sinks import attention_with_sinks


def _describe(names: tuple[str, ...], values: tuple) -> str:
    return ", ".join(f"{name} = {value}" for name, value in zip(names, values, strict=True))


def _check_rope_settings(
    d_model: int, head_dim: int, rotary_dim: int, key_dim: int, value_dim: int
) -> None:
    """rope=True needs pairs of rotated features in every head, and keys from the query's own
    tokens."""
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            f"rope: rotary features come in pairs, so the rotated width int(head_dim * "
            f"rope_fraction) must be even and at least 2, got {rotary_dim} (head_dim = "
            f"{head_dim})"
        )
    for name, width in (("key_dim", key_dim), ("value_dim", value_dim)):
        if width != d_model:
            raise ValueError(
                f"{name}: rope=True needs self-attention (keys and values from the query's "
                f"tokens), so {name} must equal d_model = {d_model}, got {width}"
            )


QK_NORM_EPS = 1e-6  # Qwen3's RMSNorm epsilon (a model's config may say otherwise)
QK_NORMS = (False, True, "head", "projection")


def _check_head_width(d_model: int, n_heads: int, n_kv_heads: int, head_dim: object) -> None:
    """The head counts and width: d_model / n_heads by default, or any positive head_dim."""
    if head_dim is None:
        check_head_counts(d_model, n_heads, n_kv_heads)
        return
    check_int("d_model", d_model)
    check_int("n_heads", n_heads)
    check_int("head_dim", head_dim)
    check_head_counts(n_heads * head_dim, n_heads, n_kv_heads)


def _check_rope_options(
    rope: bool, rope_fraction: object, rope_scaling: object, scale: object, qk_norm_eps: object
) -> None:
    """The score scale, the QK-norm epsilon and the options that only a rotary layer reads."""
    if scale is not None:
        check_positive("scale", scale)
    check_positive("qk_norm_eps", qk_norm_eps)
    bad = isinstance(rope_fraction, bool) or not isinstance(rope_fraction, int | float)
    if bad or not 0 < rope_fraction <= 1:
        raise ValueError(f"rope_fraction: expected a number in (0, 1], got {rope_fraction!r}")
    check_rope_scaling(rope_scaling, "rope_scaling")
    if not rope and (rope_fraction != 1 or rope_scaling is not None):
        raise ValueError(
            f"rope: rope_fraction ({rope_fraction!r}) and rope_scaling ({rope_scaling!r}) "
            f"only apply with rope=True"
        )


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
    if not any(qk_norm is choice for choice in QK_NORMS[:2]) and qk_norm not in QK_NORMS[2:]:
        raise ValueError(f"qk_norm: expected one of {QK_NORMS}, got {qk_norm!r}")
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

    * ``head_dim``: the width of every head, d_model / n_heads by default; the projections map
      d_model to n_heads * head_dim and back (Gemma 2: 2304 wide, 8 heads of 256).
    * ``scale``: the score scale, 1 / sqrt(head_dim) by default (Gemma: query_pre_attn_scalar
      ** -0.5).
    * ``rope_fraction``: the share of each head's features that RoPE rotates, the first
      int(head_dim * rope_fraction), paired as halves within that block, with frequencies over
      that width (transformers' ``partial_rotary_factor``; Qwen3-Next 0.25).
    * ``rope_scaling``: None or a dict in transformers' ``rope_scaling`` spelling (linear,
      dynamic, yarn, llama3; see :func:`attnbook.rope_frequencies`). Dynamic scaling reads the
      sequence length from the last position of each call: with a cache, the keys cached earlier
      keep the frequencies they were rotated with (as in transformers), so decoding token by
      token past the original length differs from one forward over the whole sequence.
    * ``window``: a sliding-window layer (Mistral, Gemma's local layers): each query sees its
      last ``window`` keys, itself included (:func:`attnbook.sliding_window_mask`). It is
      causal, so it must be called with ``is_causal=True``, optionally with a boolean ``mask``
      broadcasting to (B, H, T, S) that is combined with the window, e.g. a padding mask
      (B, 1, 1, S); ``new_cache()`` returns a :class:`attnbook.RollingKVCache` that holds only
      ``window`` positions.
    * ``output_gate``: gated attention (Qiu et al., 2025; Qwen3-Next): every head's output is
      multiplied, feature by feature, by sigmoid(gate_proj(query)) before the heads are merged,
      a gate computed from the layer's own input.
    * ``qk_norm``: QK-norm before the rotary embedding, with epsilon ``qk_norm_eps``.
      ``"head"`` (or True; Qwen3, Gemma 3): each query and key head is RMS-normalised over its
      d_head features, with a learned scale per feature (``q_norm``, ``k_norm`` of size
      d_head). ``"projection"`` (OLMo 2): the whole query projection (H * d_head features) and
      key projection (H_kv * d_head) are normalised, one weight of that size each. Gemma's and
      Qwen3-Next's norms multiply by (1 + w): load their w as ``1 + w``.
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
        qk_norm: bool | str = False,
        logit_softcap: float | None = None,
        sinks: bool = False,
        head_dim: int | None = None,
        scale: float | None = None,
        rope_fraction: float = 1.0,
        qk_norm_eps: float = QK_NORM_EPS,
        rope_scaling: dict | None = None,
    ) -> None:
        super().__init__()
        _check_head_width(d_model, n_heads, n_kv_heads, head_dim)
        _check_modern_options(window, output_gate, qk_norm, logit_softcap, sinks, dropout)
        _check_rope_options(rope, rope_fraction, rope_scaling, scale, qk_norm_eps)
        head_dim = d_model // n_heads if head_dim is None else head_dim
        key_dim = d_model if key_dim is None else key_dim
        value_dim = d_model if value_dim is None else value_dim
        check_int("key_dim", key_dim)
        check_int("value_dim", value_dim)
        check_probability("dropout", dropout)
        check_choice("rope_layout", rope_layout, ROPE_LAYOUTS)
        check_base("rope_base", rope_base)
        if rope:
            _check_rope_settings(
                d_model, head_dim, int(head_dim * rope_fraction), key_dim, value_dim
            )
        self.rope = rope
        self.rotary_dim = int(head_dim * rope_fraction)
        self.rope_scaling = rope_scaling
        self.scale = scale
        self.rope_base = rope_base
        self.rope_layout = rope_layout
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.head_dim = head_dim
        self.dropout = dropout
        width = n_heads * head_dim
        self.q_proj = nn.Linear(d_model, width, bias=bias)
        self.k_proj = nn.Linear(key_dim, n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(value_dim, n_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(width, d_model, bias=bias)
        self.window = window
        self.logit_softcap = logit_softcap
        self.gate_proj = nn.Linear(d_model, width, bias=bias) if output_gate else None
        self.qk_norm = {False: None, True: "head"}.get(qk_norm, qk_norm)
        per_head = self.qk_norm == "head"
        q_width, k_width = (head_dim, head_dim) if per_head else (width, n_kv_heads * head_dim)
        self.q_norm = nn.RMSNorm(q_width, eps=qk_norm_eps) if self.qk_norm else None
        self.k_norm = nn.RMSNorm(k_width, eps=qk_norm_eps) if self.qk_norm else None
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
        windowed = self.window is not None  # the window replaces is_causal's mask
        check_cached_attention_mask(
            mask, is_causal and not windowed, cache, KVCache, new_scores_shape
        )
        if windowed and mask is not None and mask.dtype != torch.bool:
            raise ValueError(
                f"mask: a sliding-window layer combines its window with a boolean mask (True = "
                f"attend), got dtype {mask.dtype}"
            )

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

        # (B, T, H * d_head), and keys (B, S, key_dim) to (B, S, H_kv * d_head)
        q, k = self.q_proj(query), self.k_proj(key)
        if self.qk_norm == "projection":
            q, k = self._normalise(q, k, "B T H*d_head", "B S H_kv*d_head")  # shapes unchanged
        q = split_heads(q, self.n_heads)  # (B, H, T, d_head)
        k = split_heads(k, self.n_kv_heads)  # (B, H_kv, S, d_head)
        # values (B, S, value_dim) are projected to H_kv heads
        v = split_heads(self.v_proj(value), self.n_kv_heads)  # (B, H_kv, S, d_head)
        record("q", q, "B H T d_head", "queries, projected and split into heads")
        # with a cache these are the T new positions only; the cache then holds all S
        kv_len, new = ("S", "") if cache is None else ("T", "new positions' ")
        record("k", k, f"B H_kv {kv_len} d_head", f"{new}keys, one per key/value head")
        record("v", v, f"B H_kv {kv_len} d_head", f"{new}values, one per key/value head")
        if self.qk_norm == "head":
            q, k = self._normalise(q, k, "B H T d_head", "B H_kv S d_head")  # shapes unchanged
        if self.rope:
            q, k = self._rotate(q, k, 0 if cache is None else len(cache))  # shapes unchanged
        if cache is not None:
            k, v = self._extend_cache(cache, k, v)  # (B, H_kv, S, d_head): cached and new
        if self.window is not None:
            window = sliding_window_mask(q.size(2), self.window, k.size(2), device=q.device)
            # (T, S), or with a given mask (B, 1 or H, T, S)
            mask = window if mask is None else mask & window
            is_causal = False  # the window mask is causal itself
        elif cache is not None:
            mask, is_causal = causal_over_cache(mask, is_causal, q.size(2), k.size(2), q.device)

        heads, weights = self._attend(q, k, v, mask, is_causal, need_weights)
        if self.gate_proj is not None:
            heads = self._gate(heads, query)  # (B, H, T, d_head)
        heads = gate_heads(heads, head_mask)  # (B, H, T, d_head)
        merged = merge_heads(heads)  # (B, T, H * d_head)
        width = "D" if merged.size(-1) == self.d_model else "H*d_head"
        record("merged", merged, f"B T {width}", "heads concatenated side by side")
        output = self.out_proj(merged)  # (B, T, D)
        record("output", output, "B T D", "output projection")
        return output, weights

    def _check_window_call(self, is_causal: bool, cache: KVCache | None) -> None:
        """A sliding-window layer is causal, and a rolling cache holds at least its window."""
        if self.window is not None and not is_causal:
            raise ValueError(
                f"is_causal: this layer has a sliding window (window = {self.window}), which is "
                f"a causal mask; call it with is_causal=True (and optionally a boolean mask)"
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
                scale=self.scale,
            )  # (B, H, T, d_head), (B, H, T, S) or None
        group_size = q.size(1) // k.size(1)
        k = repeat_kv(k, group_size)  # (B, H, S, d_head)
        v = repeat_kv(v, group_size)  # (B, H, S, d_head)
        heads, weights = attention_with_sinks(
            q, k, v, self.sinks, mask=mask, is_causal=is_causal, scale=self.scale
        )  # (B, H, T, d_head), (B, H, T, S)
        return heads, weights if need_weights else None

    def _normalise(self, q: Tensor, k: Tensor, q_dims: str, k_dims: str) -> tuple[Tensor, Tensor]:
        """QK-norm: RMS-normalise queries and keys over their last dim, per head or projection."""
        q, k = self.q_norm(q), self.k_norm(k)  # shapes unchanged
        over = "head" if self.qk_norm == "head" else "projection"
        record("q normed", q, q_dims, f"queries with RMS 1 per {over}, times a learned scale")
        record("k normed", k, k_dims, f"keys with RMS 1 per {over}, times a learned scale")
        return q, k

    def _gate(self, heads: Tensor, query: Tensor) -> Tensor:
        """Gated attention: heads (B, H, T, d_head) times sigmoid of a projection of the input."""
        gate = torch.sigmoid(split_heads(self.gate_proj(query), self.n_heads))  # (B, H, T, d_head)
        record("gate", gate, "B H T d_head", "sigmoid(gate_proj(x)): in (0, 1), per feature")
        return heads * gate  # (B, H, T, d_head)

    def _rotate(self, q: Tensor, k: Tensor, past: int) -> tuple[Tensor, Tensor]:
        """Rotate queries (B, H, T, d_head) and keys (B, H_kv, S = T, d_head) from position past.

        Only the first ``rotary_dim`` features of each head turn; the rest pass unchanged.
        """
        positions = torch.arange(past, past + q.size(2), device=q.device)  # (T,)
        q, k = self._rotate_part(q, positions), self._rotate_part(k, positions)  # shapes kept
        record("q rotated", q, "B H T d_head", "queries rotated at their positions")
        record("k rotated", k, "B H_kv S d_head", "keys rotated at their positions")
        return q, k

    def _rotate_part(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE on the first rotary_dim features of x (..., T, d_head), the rest unchanged."""
        rotary, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        options = {"layout": self.rope_layout, "scaling": self.rope_scaling}
        rotary = apply_rope(rotary, positions, self.rope_base, **options)  # (..., T, rotary_dim)
        return torch.cat([rotary, rest], dim=-1)  # (..., T, d_head)

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
    ``output_gate``, ``qk_norm``, ``qk_norm_eps``, ``logit_softcap``, ``sinks``, ``head_dim``,
    ``scale``), passed on unchanged.
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
        qk_norm: bool | str = False,
        logit_softcap: float | None = None,
        sinks: bool = False,
        head_dim: int | None = None,
        scale: float | None = None,
        qk_norm_eps: float = QK_NORM_EPS,
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
            head_dim=head_dim,
            scale=scale,
            qk_norm_eps=qk_norm_eps,
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
