"""A tiny decoder-only language model built from the library's pieces, and greedy generation.

:class:`TinyDecoder` embeds tokens and positions, runs ``n_layers`` pre-norm blocks of causal
self-attention and an MLP, and maps the result to logits over the vocabulary. The attention is
:class:`attnbook.GroupedQueryAttention` (``n_kv_heads`` switches between multi-head, grouped-query
and multi-query attention), or multi-head latent attention with ``variant="mla"``.
:func:`greedy_generate` decodes greedily, either recomputing every position at every step or
feeding one new token at a time on top of one cache per layer, made by the layer's attention
module (``new_cache()``): a :class:`attnbook.KVCache`, or a latent cache for MLA.
"""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnbook._checks import check_tensor, shape_of
from attnbook.latent import MultiHeadLatentAttention
from attnbook.multihead import GroupedQueryAttention
from attnbook.trace import record

VARIANTS = ("mha", "gqa", "mqa", "mla")


def _check_variant(variant: str, n_heads: int, n_kv_heads: int, kv_latent_dim: int | None) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    if variant == "mha" and n_kv_heads != n_heads:
        raise ValueError(
            f"n_kv_heads: multi-head attention has n_kv_heads = n_heads = {n_heads}, "
            f"got {n_kv_heads}"
        )
    if variant == "mqa" and n_kv_heads != 1:
        raise ValueError(f"n_kv_heads: multi-query attention has n_kv_heads = 1, got {n_kv_heads}")
    if variant == "mla" and (kv_latent_dim is None or n_kv_heads != n_heads):
        raise ValueError(
            f"variant 'mla' needs kv_latent_dim and n_kv_heads = n_heads = {n_heads} (every "
            f"head gets its own key and value from the latent); got kv_latent_dim = "
            f"{kv_latent_dim}, n_kv_heads = {n_kv_heads}"
        )
    if variant != "mla" and kv_latent_dim is not None:
        raise ValueError(f"kv_latent_dim: only variant 'mla' has a latent, got variant {variant!r}")


def attention_factory(
    variant: str,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    *,
    kv_latent_dim: int | None = None,
    rope_dim: int = 0,
) -> Callable[[], nn.Module]:
    """A function that builds one causal self-attention layer of the given variant.

    ``variant``: ``"mha"`` (``n_kv_heads == n_heads``), ``"gqa"`` (any ``n_kv_heads`` dividing
    ``n_heads``), ``"mqa"`` (``n_kv_heads == 1``): a :class:`GroupedQueryAttention`;
    ``"mla"``: :class:`attnbook.latent.MultiHeadLatentAttention` caching a ``kv_latent_dim``-wide
    latent per token (``n_kv_heads`` must equal ``n_heads``; ``rope_dim`` is passed on). All
    variants have biases in their projections, as the default ``GroupedQueryAttention``.
    """
    _check_variant(variant, n_heads, n_kv_heads, kv_latent_dim)
    if variant == "mla":
        return lambda: MultiHeadLatentAttention(
            d_model, n_heads, kv_latent_dim, rope_dim=rope_dim, bias=True
        )
    return lambda: GroupedQueryAttention(d_model, n_heads, n_kv_heads)


class DecoderBlock(nn.Module):
    """x + attention(norm(x)), then x + MLP(norm(x)): one pre-norm transformer block.

    ``attention``: the self-attention module to use (anything called like
    :class:`GroupedQueryAttention` in self-attention, with a ``new_cache()`` method); by default
    ``GroupedQueryAttention(d_model, n_heads, n_kv_heads)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        mlp_width: int,
        *,
        attention: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model)
        if attention is None:
            attention = GroupedQueryAttention(d_model, n_heads, n_kv_heads)
        self.attention = attention
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_width), nn.GELU(), nn.Linear(mlp_width, d_model)
        )

    def forward_with_weights(
        self, x: Tensor, cache=None, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """The block's output (B, T, D) and, with ``need_weights``, its attention (B, H, T, S)."""
        attended, weights = self.attention(
            self.attention_norm(x), is_causal=True, need_weights=need_weights, cache=cache
        )
        x = x + attended  # (B, T, D)
        return x + self.mlp(self.mlp_norm(x)), weights  # (B, T, D), (B, H, T, S) or None

    def forward(self, x: Tensor, cache=None) -> Tensor:
        return self.forward_with_weights(x, cache)[0]  # (B, T, D)


class TinyDecoder(nn.Module):
    """A decoder-only model: token and position embeddings, ``n_layers`` blocks, an LM head.

    ``forward(tokens, caches=None)`` takes token ids (B, T) and returns logits (B, T, V) for V =
    ``vocab_size``. With ``caches`` (one cache per layer, see :meth:`new_caches`) the T tokens
    are taken to follow the positions already cached: their positions start at the cache's
    length, and each layer attends over the cached keys and values too.

    ``variant`` picks the attention (see :func:`attention_factory`): ``"gqa"`` (the default,
    any ``n_kv_heads``), ``"mha"``, ``"mqa"`` or ``"mla"`` (with ``kv_latent_dim``).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        n_layers: int,
        max_len: int,
        *,
        mlp_width: int | None = None,
        variant: str = "gqa",
        kv_latent_dim: int | None = None,
        rope_dim: int = 0,
    ) -> None:
        super().__init__()
        sizes = (("vocab_size", vocab_size), ("n_layers", n_layers), ("max_len", max_len))
        for name, value in sizes:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        make_attention = attention_factory(
            variant, d_model, n_heads, n_kv_heads, kv_latent_dim=kv_latent_dim, rope_dim=rope_dim
        )
        self.variant = variant
        width = 4 * d_model if mlp_width is None else mlp_width
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, n_kv_heads, width, attention=make_attention())
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def new_caches(self) -> list:
        """One empty cache per layer, made by the layer's attention (``new_cache()``)."""
        return [block.attention.new_cache() for block in self.blocks]

    def _check_tokens(self, tokens: Tensor, past: int) -> None:
        check_tensor("tokens", tokens, "(B, T)", rank=2)
        if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise ValueError(f"tokens: expected integer token ids, got dtype {tokens.dtype}")
        if past + tokens.size(1) > self.max_len:
            raise ValueError(
                f"tokens: {past} cached + {tokens.size(1)} new positions exceed max_len = "
                f"{self.max_len}; got tokens.shape = {shape_of(tokens)}"
            )

    def _embed(self, tokens: Tensor, past: int) -> Tensor:
        self._check_tokens(tokens, past)
        positions = torch.arange(past, past + tokens.size(1), device=tokens.device)  # (T,)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, D)
        record("embedded", x, "B T D", "token + position embeddings")
        return x

    def forward(self, tokens: Tensor, caches: list | None = None) -> Tensor:
        if caches is not None and len(caches) != len(self.blocks):
            kind = type(self.blocks[0].attention.new_cache()).__name__
            raise ValueError(f"caches: expected {len(self.blocks)} {kind}, got {len(caches)}")
        past = 0 if caches is None else len(caches[0])
        x = self._embed(tokens, past)  # (B, T, D)
        for index, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[index])  # (B, T, D)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        record("logits", logits, "B T V", "a score for every vocabulary entry (V)")
        return logits

    @torch.no_grad()
    def attention_weights(self, tokens: Tensor) -> Tensor:
        """The causal attention weights of every layer for ``tokens`` (B, T): (L, B, H, T, T)."""
        x = self._embed(tokens, 0)  # (B, T, D)
        layer_weights = []
        for block in self.blocks:
            x, weights = block.forward_with_weights(x, need_weights=True)  # (B, T, D), (B, H, T, T)
            layer_weights.append(weights)
        return torch.stack(layer_weights)  # (L, B, H, T, T)


@torch.no_grad()
def greedy_generate(
    model: TinyDecoder, prompt: Tensor, n_new: int, *, use_cache: bool = True
) -> tuple[Tensor, Tensor]:
    """Greedy decoding: append the most likely next token ``n_new`` times.

    prompt: token ids (B, T0). Returns (tokens (B, T0 + n_new), logits (B, n_new, V)), the
    logits each new token was chosen from. ``use_cache=False`` runs the model over the whole
    sequence at every step (recomputation); ``use_cache=True`` runs the prompt once (prefill)
    and then only the newest token, reading earlier keys and values from a cache per layer.
    Both choose the same tokens; the logits agree to rounding.
    """
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 1:
        raise ValueError(f"n_new: expected a positive int, got {n_new!r}")
    check_tensor("prompt", prompt, "(B, T0)", rank=2)
    if prompt.size(1) + n_new - 1 > model.max_len:  # the last new token is never fed back
        raise ValueError(
            f"n_new: a {prompt.size(1)}-token prompt and {n_new} new tokens need "
            f"{prompt.size(1) + n_new - 1} positions, more than max_len = {model.max_len}"
        )
    caches = model.new_caches() if use_cache else None
    tokens, step_input, step_logits = prompt, prompt, []
    for _ in range(n_new):
        logits = model(step_input, caches)[:, -1]  # (B, V): the last position's scores
        next_token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)  # (B, T0 + steps so far)
        step_input = next_token if use_cache else tokens  # (B, 1) or (B, T0 + steps so far)
        step_logits.append(logits)
    return tokens, torch.stack(step_logits, dim=1)  # (B, T0 + n_new), (B, n_new, V)
