"""Multi-head latent attention (MLA, DeepSeek-AI 2024) and the latent cache it decodes with.

Instead of caching H_kv keys and values per token, MLA caches one small latent vector c_kv
(``kv_latent_dim`` wide) per token, from which every head's keys and values are re-derived by
two up-projections. With ``rope_dim > 0`` each token also caches one rotary key (``rope_dim``
wide) shared by all heads: the decoupled rotary position embedding, which keeps the
up-projections foldable into the query and output projections
(:meth:`MultiHeadLatentAttention.absorbed_forward`).

Two options add parts of DeepSeek-V2's released attention: ``q_latent_dim`` compresses the
queries through a normalised latent c_Q, and ``latent_norm`` normalises c_kv before caching.
"""

import math

import torch
from torch import Tensor, nn

from attnbook.core._checks import (
    check_bool,
    check_cached_attention_mask,
    check_head_counts,
    check_head_mask,
    check_int,
    check_model_input,
    check_probability,
    check_same_dtype,
    check_tensor,
    shape_of,
)
from attnbook.core.attention import attend, masked_softmax
from attnbook.core.heads import gate_heads, merge_heads, split_heads
from attnbook.core.masks import causal_mask, causal_over_cache
from attnbook.core.positions import apply_rope
from attnbook.core.trace import record

NORM_EPS = 1e-6  # rms_norm_eps of DeepSeek-V2's configuration in Hugging Face Transformers


class LatentCache:
    """What MLA keeps per token: the latent c_kv and, with RoPE, one shared rotary key.

    ``latents`` is (B, S, kv_latent_dim) and ``rope_keys`` (B, S, rope_dim), both None until
    the first :meth:`append` (``rope_keys`` stays None for a layer without RoPE). The rotary
    keys are stored already rotated to their positions.
    """

    def __init__(self) -> None:
        self.latents: Tensor | None = None
        self.rope_keys: Tensor | None = None

    def __len__(self) -> int:
        """The number of cached positions S (0 for an empty cache)."""
        return 0 if self.latents is None else self.latents.size(1)

    def __repr__(self) -> str:
        latents = None if self.latents is None else tuple(self.latents.shape)
        rope = None if self.rope_keys is None else tuple(self.rope_keys.shape)
        return f"LatentCache(positions={len(self)}, latents {latents}, rope keys {rope})"

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached latents and rotary keys together (numel * element size)."""
        held = [t for t in (self.latents, self.rope_keys) if t is not None]
        return sum(t.numel() * t.element_size() for t in held)

    def _check_new(self, latents: Tensor, rope_keys: Tensor | None) -> None:
        check_tensor("latents", latents, "(B, T, kv_latent_dim)", rank=3)
        if rope_keys is not None:
            check_tensor("rope_keys", rope_keys, "(B, T, rope_dim)", rank=3)
            check_same_dtype("rope_keys", rope_keys, latents, "latents")
            if rope_keys.shape[:2] != latents.shape[:2]:
                raise ValueError(
                    f"rope_keys: expected (B, T, rope_dim) with B, T = {latents.size(0)}, "
                    f"{latents.size(1)} as in latents, got rope_keys.shape = {shape_of(rope_keys)}"
                )
        if self.latents is None:
            return
        if (self.rope_keys is None) != (rope_keys is None):
            held = "holds" if self.rope_keys is not None else "holds no"
            raise ValueError(f"rope_keys: the cache {held} rotary keys; append the same kind")
        cached = self.latents.shape
        if (latents.size(0), latents.size(2)) != (cached[0], cached[2]):
            raise ValueError(
                f"latents: expected (B, T, kv_latent_dim) with B, kv_latent_dim = {cached[0]}, "
                f"{cached[2]} as in the cache, got latents.shape = {shape_of(latents)}"
            )
        if rope_keys is not None and rope_keys.size(2) != self.rope_keys.size(2):
            raise ValueError(
                f"rope_keys: expected rope_dim = {self.rope_keys.size(2)} as in the cache, got "
                f"rope_keys.shape = {shape_of(rope_keys)}"
            )
        check_same_dtype("latents", latents, self.latents, "the cache")
        if latents.device != self.latents.device:
            raise ValueError(
                f"latents: on {latents.device}, but the cache is on {self.latents.device}"
            )

    def append(
        self, latents: Tensor, rope_keys: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Add T positions: latents (B, T, kv_latent_dim), rope_keys (B, T, rope_dim) or None.

        Returns all S cached (latents (B, S, kv_latent_dim), rope_keys (B, S, rope_dim) or
        None), new positions last. A shape, dtype or device that does not fit raises
        ``ValueError`` and leaves the cache as it was.
        """
        self._check_new(latents, rope_keys)
        if self.latents is None:
            self.latents, self.rope_keys = latents, rope_keys
        else:
            self.latents = torch.cat([self.latents, latents], dim=1)  # (B, S, kv_latent_dim)
            if rope_keys is not None:
                self.rope_keys = torch.cat([self.rope_keys, rope_keys], dim=1)  # (B, S, rope_dim)
        return self.latents, self.rope_keys


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2): heads share one cached latent per token.

    Per token x (D): latent ``c_kv = kv_down(x)`` (kv_latent_dim); keys ``k_up(c_kv)`` and
    values ``v_up(c_kv)`` (H heads of d_head = D / H); queries ``q_proj(x)`` (H heads). With
    ``rope_dim > 0``, each head's query also gets a rotary part ``q_rope_proj(x)`` (rope_dim per
    head) and each token one rotary key ``k_rope_proj(x)`` (rope_dim) shared by all heads; both
    are rotated to their positions and concatenated after the content parts, so the scale is
    1 / sqrt(d_head + rope_dim). The up-projections have no bias (``bias`` sets the others).

    Two parts of the released DeepSeek-V2 model, both off by default: with ``q_latent_dim > 0``
    the queries are compressed too, ``c_Q = q_norm(q_down(x))`` (q_latent_dim, an RMSNorm), and
    ``q_proj`` and ``q_rope_proj`` read c_Q instead of x (this saves activations in training,
    not cache). With ``latent_norm`` an RMSNorm ``kv_norm`` is applied to c_kv, and the
    normalised latent is what is cached and up-projected; the rotary key still comes from x,
    unnormalised. Both norms use eps = 1e-6, as DeepSeek-V2's configuration does.

    ``forward(x, *, mask=None, is_causal=False, need_weights=False, cache=None)`` takes x
    (B, T, D) and returns (output (B, T, D), weights (B, H, T, S) or None); masks and errors
    follow :class:`attnbook.GroupedQueryAttention`. ``cache`` (from :meth:`new_cache`): the new
    tokens' latents and rotary keys are appended, their positions start at the cache's length,
    and with ``is_causal`` the mask is ``causal_mask(T, S, align="bottom-right")``.
    ``head_mask`` (H,) or (B, H) gates each head's output before the merge, as in
    :class:`attnbook.GroupedQueryAttention` (and in :meth:`absorbed_forward`, each head's
    weighted latents, which is the same thing).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        kv_latent_dim: int,
        *,
        rope_dim: int = 0,
        bias: bool = False,
        dropout: float = 0.0,
        q_latent_dim: int = 0,
        latent_norm: bool = False,
    ) -> None:
        super().__init__()
        check_head_counts(d_model, n_heads, n_heads)
        check_int("kv_latent_dim", kv_latent_dim)
        check_int("rope_dim", rope_dim, low=0)
        if rope_dim % 2:
            raise ValueError(
                f"rope_dim: rotary features come in pairs, so rope_dim must be even, got {rope_dim}"
            )
        check_probability("dropout", dropout)
        check_int("q_latent_dim", q_latent_dim, low=0)
        check_bool("latent_norm", latent_norm)
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.kv_latent_dim = kv_latent_dim
        self.rope_dim = rope_dim
        self.dropout = dropout
        self.q_latent_dim = q_latent_dim
        query_width = q_latent_dim or d_model  # what the query projections read: c_Q or x
        self.q_proj = nn.Linear(query_width, d_model, bias=bias)  # W_Q, or W_UQ from c_Q
        self.kv_down = nn.Linear(d_model, kv_latent_dim, bias=bias)  # W_DKV
        self.k_up = nn.Linear(kv_latent_dim, d_model, bias=False)  # W_UK
        self.v_up = nn.Linear(kv_latent_dim, d_model, bias=False)  # W_UV
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        self.q_rope_proj = (
            nn.Linear(query_width, n_heads * rope_dim, bias=bias) if rope_dim else None
        )  # W_QR
        self.k_rope_proj = nn.Linear(d_model, rope_dim, bias=bias) if rope_dim else None  # W_KR
        self.q_down = nn.Linear(d_model, q_latent_dim, bias=bias) if q_latent_dim else None  # W_DQ
        self.q_norm = nn.RMSNorm(q_latent_dim, eps=NORM_EPS) if q_latent_dim else None
        self.kv_norm = nn.RMSNorm(kv_latent_dim, eps=NORM_EPS) if latent_norm else None

    def new_cache(self) -> LatentCache:
        """An empty :class:`LatentCache` for this layer."""
        return LatentCache()

    def _check_inputs(
        self,
        x: Tensor,
        mask: Tensor | None,
        is_causal: bool,
        cache: LatentCache | None,
        head_mask: Tensor | None,
    ) -> None:
        check_model_input("x", x, "(B, T, D)", self.d_model)
        new_scores_shape = (x.size(0), self.n_heads, x.size(1), x.size(1))
        check_cached_attention_mask(mask, is_causal, cache, LatentCache, new_scores_shape)
        check_head_mask(head_mask, x.size(0), self.n_heads, x.dtype)

    def _query_input(self, x: Tensor) -> Tensor:
        """What the query projections read: x (B, T, D), or c_Q (B, T, d_c') if compressed."""
        if self.q_down is None:
            return x
        compressed = self.q_norm(self.q_down(x))  # (B, T, d_c')
        record("c_q", compressed, "B T d_c'", "compressed query latent, RMS-normalised")
        return compressed

    def _new_latents(self, x: Tensor) -> Tensor:
        """The new tokens' latents c_kv (B, T, d_c), RMS-normalised with ``latent_norm``."""
        latents = self.kv_down(x)  # (B, T, d_c)
        if self.kv_norm is not None:
            latents = self.kv_norm(latents)  # (B, T, d_c)
        kind = "latent" if self.kv_norm is None else "RMS-normalised latent"
        record("c_kv", latents, "B T d_c", f"{kind} per token: what the cache keeps")
        return latents

    def _latents_and_rope(
        self, x: Tensor, cache: LatentCache | None
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """The query input, then the latents, rotary keys for all S positions, rope queries.

        Returns (query input (B, T, D or d_c'), latents (B, S, d_c), rope_keys (B, S, d_R) or
        None, rotated rope queries (B, H, T, d_R) or None).
        """
        past = 0 if cache is None else len(cache)
        positions = torch.arange(past, past + x.size(1), device=x.device)  # (T,)
        query_input = self._query_input(x)  # (B, T, D) or (B, T, d_c')
        latents = self._new_latents(x)  # (B, T, d_c)
        q_rope = rope_keys = None
        if self.rope_dim:
            q_rope = split_heads(self.q_rope_proj(query_input), self.n_heads)  # (B, H, T, d_R)
            q_rope = apply_rope(q_rope, positions)  # (B, H, T, d_R)
            rope_keys = apply_rope(self.k_rope_proj(x), positions)  # (B, T, d_R)
            record("q rope", q_rope, "B H T d_R", "rotary query part, one per head, rotated")
            record("k rope", rope_keys, "B T d_R", "rotary key, one per token, shared by heads")
        if cache is not None:
            latents, rope_keys = cache.append(latents, rope_keys)  # (B, S, d_c), (B, S, d_R)
            record("c_kv cache", latents, "B S d_c", "cached latents: every position so far")
            if rope_keys is not None:
                record("k rope cache", rope_keys, "B S d_R", "cached rotary keys")
        return query_input, latents, rope_keys, q_rope

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: LatentCache | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        self._check_inputs(x, mask, is_causal, cache, head_mask)
        query_input, latents, rope_keys, q_rope = self._latents_and_rope(x, cache)
        q = split_heads(self.q_proj(query_input), self.n_heads)  # (B, H, T, d_head)
        k = split_heads(self.k_up(latents), self.n_heads)  # (B, H, S, d_head)
        v = split_heads(self.v_up(latents), self.n_heads)  # (B, H, S, d_head)
        record("q", q, "B H T d_head", "content queries, one per head")
        record("k", k, "B H S d_head", "content keys, up-projected from the latents")
        record("v", v, "B H S d_head", "values, up-projected from the latents")
        if rope_keys is not None:
            shared = rope_keys[:, None].expand(-1, self.n_heads, -1, -1)  # (B, H, S, d_R)
            q = torch.cat([q, q_rope], dim=-1)  # (B, H, T, d_head + d_R)
            k = torch.cat([k, shared], dim=-1)  # (B, H, S, d_head + d_R)
            record("q full", q, "B H T d_qk", "content and rotary query parts, d_head + d_R")
            record("k full", k, "B H S d_qk", "content and shared rotary key parts")
        mask, is_causal = causal_over_cache(mask, is_causal, q.size(2), k.size(2), x.device)
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

    def absorbed_weights(self) -> tuple[Tensor, Tensor | None, Tensor]:
        """The folded projections: query into latent space, and latent into the output.

        Returns (W_q_absorbed (H, d_c, D_q), b_q_absorbed (H, d_c) or None, W_o_absorbed
        (H, D, d_c)), where the query input is x (D_q = D) or, with ``q_latent_dim``, the
        normalised compressed query c_Q (D_q = d_c'): head h's query in latent space is
        ``W_UK_h^T (W_Q_h input + b_Q_h)`` (W_UK folds into W_UQ when the queries are
        compressed), and its latent output o_h (d_c) contributes ``W_O_h W_UV_h o_h``.
        """
        heads, d_head = self.n_heads, self.head_dim
        w_q = self.q_proj.weight.view(heads, d_head, self.q_proj.in_features)  # (H, d_head, D_q)
        w_uk = self.k_up.weight.view(heads, d_head, self.kv_latent_dim)  # (H, d_head, d_c)
        w_uv = self.v_up.weight.view(heads, d_head, self.kv_latent_dim)  # (H, d_head, d_c)
        w_o = self.out_proj.weight.view(self.d_model, heads, d_head).transpose(0, 1)  # (H, D, dh)
        w_q_absorbed = w_uk.transpose(1, 2) @ w_q  # (H, d_c, D_q)
        b_q_absorbed = None
        if self.q_proj.bias is not None:
            b_q = self.q_proj.bias.view(heads, d_head, 1)  # (H, d_head, 1)
            b_q_absorbed = (w_uk.transpose(1, 2) @ b_q).squeeze(-1)  # (H, d_c)
        w_o_absorbed = w_o @ w_uv  # (H, D, d_c)
        return w_q_absorbed, b_q_absorbed, w_o_absorbed

    def absorbed_forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: LatentCache | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The same attention computed in latent space: keys and values never up-projected.

        The query input (x, or c_Q with ``q_latent_dim``) is mapped into the latent space with
        :meth:`absorbed_weights`, scored against the cached latents (normalised ones with
        ``latent_norm``) directly, and the weighted latents are mapped to the output by the
        folded output projection. Same arguments and result as :meth:`forward` with
        ``need_weights=True`` (no dropout); returns (output (B, T, D), weights (B, H, T, S)).
        """
        self._check_inputs(x, mask, is_causal, cache, head_mask)
        query_input, latents, rope_keys, q_rope = self._latents_and_rope(x, cache)
        w_q_absorbed, b_q_absorbed, w_o_absorbed = self.absorbed_weights()
        work_dtype = torch.promote_types(x.dtype, torch.float32)
        q_latent = torch.einsum("hcd,btd->bhtc", w_q_absorbed, query_input)  # (B, H, T, d_c)
        if b_q_absorbed is not None:
            q_latent = q_latent + b_q_absorbed[None, :, None, :]  # (B, H, T, d_c)
        record("q latent", q_latent, "B H T d_c", "queries folded into the latent space")
        scores = q_latent @ latents[:, None].transpose(-2, -1)  # (B, H, T, S)
        if rope_keys is not None:
            scores = scores + q_rope @ rope_keys[:, None].transpose(-2, -1)  # (B, H, T, S)
        scores = scores / math.sqrt(self.head_dim + self.rope_dim)  # (B, H, T, S)
        record("scores", scores, "B H T S", "scores against the cached latents directly")
        if is_causal:
            mask = causal_mask(
                x.size(1), latents.size(1), align="bottom-right", device=x.device
            )  # (T, S): the new queries are the last T positions
        weights = masked_softmax(scores.to(work_dtype), mask).to(latents.dtype)  # (B, H, T, S)
        out_latent = gate_heads(weights @ latents[:, None], head_mask)  # (B, H, T, d_c)
        record("o latent", out_latent, "B H T d_c", "weighted latents, one per head")
        output = torch.einsum("hdc,bhtc->btd", w_o_absorbed, out_latent)  # (B, T, D)
        if self.out_proj.bias is not None:
            output = output + self.out_proj.bias  # (B, T, D)
        record("output", output, "B T D", "folded output projection, summed over heads")
        return output, weights
