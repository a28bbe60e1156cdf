"""A tiny decoder-only language model built from the library's pieces, and greedy generation.

:class:`TinyDecoder` embeds tokens (and positions, by one of the schemes of
:mod:`attnbook.core.positions`), runs ``n_layers`` pre-norm blocks of causal self-attention and an
MLP, and maps the result to logits over the vocabulary. The attention is
:class:`attnbook.GroupedQueryAttention`, whose ``n_kv_heads`` alone says whether it is
multi-head (``n_kv_heads == n_heads``), grouped-query or multi-query (``n_kv_heads == 1``)
attention, or multi-head latent attention when ``kv_latent_dim`` is given.
:func:`greedy_generate` decodes greedily, either recomputing every position at every step or
feeding one new token at a time on top of one cache per layer, made by the layer's attention
module (``new_cache()``): a :class:`attnbook.KVCache`, or a latent cache for MLA.
"""

import torch
from torch import Tensor, nn

from attnbook.core._checks import (
    check_bool,
    check_choice,
    check_even,
    check_int,
    check_tensor,
    shape_of,
)
from attnbook.core.positions import alibi_bias, sinusoidal_encoding
from attnbook.core.trace import record
from attnbook.layers.latent import MultiHeadLatentAttention
from attnbook.layers.multihead import GroupedQueryAttention
from attnbook.linear.gated_deltanet import GatedDeltaNet
from attnbook.linear.linear_layer import LinearAttentionLayer


def make_attention(
    d_model: int,
    n_heads: int,
    *,
    n_kv_heads: int | None = None,
    kv_latent_dim: int | None = None,
    rope_dim: int = 0,
    rope: bool = False,
    output_gate: bool = False,
) -> nn.Module:
    """One self-attention layer: GQA with ``n_kv_heads`` key/value heads, or MLA.

    ``n_kv_heads`` defaults to ``n_heads`` (multi-head attention); 1 is multi-query attention.
    ``rope=True`` gives the GQA layer a rotary embedding in the split-halves layout (Llama's).
    With ``kv_latent_dim`` the layer is a :class:`attnbook.MultiHeadLatentAttention` caching a
    ``kv_latent_dim``-wide latent per token (and ``rope_dim`` rotary features); ``n_kv_heads``
    then has no meaning and must be left out. ``output_gate=True`` gives the GQA layer its
    sigmoid output gate (gated attention). Every layer has biases in its projections.
    """
    if kv_latent_dim is not None:
        if n_kv_heads is not None:
            raise ValueError(
                f"n_kv_heads: latent attention (kv_latent_dim = {kv_latent_dim}) derives every "
                f"head's key and value from one latent; leave n_kv_heads out, got {n_kv_heads}"
            )
        if rope:
            raise ValueError(
                "rope: latent attention has its own decoupled rotary key; set rope_dim instead"
            )
        if output_gate:
            raise ValueError("output_gate: only grouped-query attention has one, not latent")
        return MultiHeadLatentAttention(
            d_model, n_heads, kv_latent_dim, rope_dim=rope_dim, bias=True
        )
    if rope_dim:
        raise ValueError(f"rope_dim: only latent attention (kv_latent_dim) has one, got {rope_dim}")
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    return GroupedQueryAttention(d_model, n_heads, n_kv_heads, rope=rope, output_gate=output_gate)


LAYER_KINDS = {"A": "softmax attention", "G": "Gated DeltaNet", "L": "linear attention"}


def _check_layer_pattern(layer_pattern: str | None, n_layers: int) -> str:
    """The pattern as a string of n_layers letters from LAYER_KINDS ("A" * L when None)."""
    if layer_pattern is None:
        return "A" * n_layers
    if (
        not isinstance(layer_pattern, str)
        or len(layer_pattern) != n_layers
        or not set(layer_pattern) <= set(LAYER_KINDS)
    ):
        raise ValueError(
            f"layer_pattern: expected {n_layers} letters (n_layers), each one of "
            f"{LAYER_KINDS}, got {layer_pattern!r}"
        )
    return layer_pattern


def attention_kind(attention: nn.Module) -> str:
    """``"mha"``, ``"gqa"``, ``"mqa"`` or ``"mla"``: what a layer from :func:`make_attention` is."""
    if isinstance(attention, MultiHeadLatentAttention):
        return "mla"
    if attention.n_kv_heads == attention.n_heads:
        return "mha"
    return "mqa" if attention.n_kv_heads == 1 else "gqa"


class DecoderBlock(nn.Module):
    """x + attention(norm(x)), then x + MLP(norm(x)): one pre-norm transformer block.

    ``attention``: the self-attention module (anything called like
    :class:`GroupedQueryAttention` in self-attention, with ``d_model`` and a ``new_cache()``
    method); its width is the block's. ``mlp_width``: the MLP's hidden width.
    ``attention_only=True`` leaves the MLP out: the block is x + attention(norm(x)).
    """

    def __init__(self, attention: nn.Module, mlp_width: int, *, attention_only: bool = False):
        super().__init__()
        check_int("mlp_width", mlp_width)
        check_bool("attention_only", attention_only)
        d_model = attention.d_model
        self.attention_norm = nn.LayerNorm(d_model)
        self.attention = attention
        self.mlp_norm = self.mlp = None
        if not attention_only:
            self.mlp_norm = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(
                nn.Linear(d_model, mlp_width), nn.GELU(), nn.Linear(mlp_width, d_model)
            )

    def forward_with_weights(
        self,
        x: Tensor,
        cache=None,
        *,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """The block's output (B, T, D) and, with ``need_weights``, its attention (B, H, T, S).

        ``head_mask`` (H,) or (B, H) gates the attention's heads (see
        :class:`attnbook.GroupedQueryAttention`). ``mask``: None for plain causal attention,
        or a float mask (H, T, S) that is causal itself, such as :func:`attnbook.alibi_bias`.
        """
        attended, weights = self.attention(
            self.attention_norm(x),
            mask=mask,
            is_causal=mask is None,
            need_weights=need_weights,
            cache=cache,
            head_mask=head_mask,
        )
        x = x + attended  # (B, T, D)
        if self.mlp is None:
            return x, weights  # (B, T, D), (B, H, T, S) or None
        return x + self.mlp(self.mlp_norm(x)), weights  # (B, T, D), (B, H, T, S) or None

    def forward(
        self,
        x: Tensor,
        cache=None,
        *,
        head_mask: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        return self.forward_with_weights(x, cache, head_mask=head_mask, mask=mask)[0]  # (B, T, D)


POSITION_SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "none")


def _check_position_scheme(
    positions: str, d_model: int, kv_latent_dim: int | None, rope_dim: int
) -> None:
    """The position schemes each attention supports; MLA carries rotary positions in rope_dim."""
    check_choice("positions", positions, POSITION_SCHEMES)
    if positions == "sinusoidal":
        check_even("d_model", d_model, "sinusoidal encodings come in (sin, cos) pairs")
    if kv_latent_dim is None:
        return
    if positions == "alibi":
        raise ValueError(
            "positions: 'alibi' is not supported with latent attention (kv_latent_dim); use "
            "'learned', 'sinusoidal', 'none', or 'rope' with rope_dim > 0"
        )
    if positions == "rope" and not rope_dim:
        raise ValueError(
            "positions: 'rope' with latent attention means its decoupled rotary key, so "
            f"rope_dim must be > 0, got {rope_dim}"
        )


def _make_mixer(kind: str, d_model: int, n_heads: int, attention: dict) -> nn.Module:
    """The token-mixing module of one layer: ``kind`` is a letter of LAYER_KINDS."""
    if kind == "G":
        return GatedDeltaNet(d_model, n_heads)
    if kind == "L":
        return LinearAttentionLayer(d_model, n_heads)
    return make_attention(d_model, n_heads, **attention)


class TinyDecoder(nn.Module):
    """A decoder-only model: token and position embeddings, ``n_layers`` blocks, an LM head.

    ``forward(tokens, caches=None)`` takes token ids (B, T) in [0, vocab_size), of any integer
    dtype (converted to int64; float, bool and complex ids are refused), and returns
    logits (B, T, V) for V = ``vocab_size``. With ``caches`` (one cache per layer, see
    :meth:`new_caches`) the T tokens are taken to follow the positions already cached: their
    positions start at the cache's length, and each layer attends over the cached keys and
    values too.

    ``positions`` chooses how the model knows where a token is: ``"learned"`` (the default),
    a table of ``max_len`` trained embeddings added to the tokens, so at most ``max_len``
    positions; ``"sinusoidal"``, fixed encodings added to the tokens; ``"rope"``, rotary
    embeddings of queries and keys in every layer (split-halves layout); ``"alibi"``, a linear
    distance penalty per head added to the scores; ``"none"``, nothing (the causal mask alone).
    Only ``"learned"`` limits the length to ``max_len``. With latent attention
    (``kv_latent_dim``) ``"rope"`` means MLA's decoupled rotary key and needs ``rope_dim > 0``,
    and ``"alibi"`` is refused.

    Every size is a keyword: ``TinyDecoder(V, d_model=16, n_heads=4, n_layers=2, max_len=12)``.
    The attention is chosen by :func:`make_attention`'s arguments: ``n_kv_heads`` (default
    ``n_heads``: MHA; fewer: GQA; 1: MQA) or ``kv_latent_dim`` (MLA, with ``rope_dim``).
    ``variant`` names the result. ``mlp_width`` defaults to 4 * d_model.
    ``attention_only=True`` builds every block without its MLP, the attention-only models in
    which Elhage et al. traced circuits. ``output_gate=True`` gives every layer gated attention
    (:class:`attnbook.GroupedQueryAttention`'s output gate).

    ``layer_pattern`` mixes layer kinds, one letter per layer: ``"A"`` the softmax attention
    above, ``"G"`` a :class:`attnbook.GatedDeltaNet`, ``"L"`` a
    :class:`attnbook.LinearAttentionLayer` (both with ``n_heads`` heads); ``"GGGA"`` is a 3:1
    hybrid as in Qwen3-Next. None (the default) is ``"A"`` for every layer. The linear layers
    refuse ALiBi's bias (a mask) and have no weights to return (chapter 18).
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int,
        n_heads: int,
        n_layers: int,
        max_len: int,
        n_kv_heads: int | None = None,
        kv_latent_dim: int | None = None,
        rope_dim: int = 0,
        mlp_width: int | None = None,
        positions: str = "learned",
        attention_only: bool = False,
        output_gate: bool = False,
        layer_pattern: str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("n_layers", n_layers),
            ("max_len", max_len),
        ):
            check_int(name, value)
        _check_position_scheme(positions, d_model, kv_latent_dim, rope_dim)
        self.layer_pattern = _check_layer_pattern(layer_pattern, n_layers)
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.positions = positions
        self.n_heads = n_heads
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        learned = positions == "learned"
        self.position_embedding = nn.Embedding(max_len, d_model) if learned else None
        width = 4 * d_model if mlp_width is None else mlp_width
        attention = {
            "n_kv_heads": n_kv_heads,
            "kv_latent_dim": kv_latent_dim,
            "rope_dim": rope_dim,
            "rope": positions == "rope" and kv_latent_dim is None,
            "output_gate": output_gate,
        }
        self.blocks = nn.ModuleList(
            DecoderBlock(
                _make_mixer(kind, d_model, n_heads, attention),
                width,
                attention_only=attention_only,
            )
            for kind in self.layer_pattern
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    @property
    def variant(self) -> str:
        """``"mha"``, ``"gqa"``, ``"mqa"`` or ``"mla"``, read off the (first softmax) layer."""
        first = self.layer_pattern.find("A")
        return "linear" if first < 0 else attention_kind(self.blocks[first].attention)

    def new_caches(self) -> list:
        """One empty cache per layer, made by the layer's attention (``new_cache()``)."""
        return [block.attention.new_cache() for block in self.blocks]

    def _check_tokens(self, tokens: Tensor, past: int) -> Tensor:
        """The token ids as int64 (uint8, int16, ... are converted), after checking them."""
        check_tensor("tokens", tokens, "(B, T)", rank=2)
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens: expected integer token ids, got dtype {tokens.dtype}")
        tokens = tokens.long()  # the embedding takes int64 ids; unsigned ones have no min()
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(
                f"tokens: expected ids in [0, vocab_size = {self.vocab_size}), got values from "
                f"{tokens.min().item()} to {tokens.max().item()}"
            )
        if self.positions == "learned" and past + tokens.size(1) > self.max_len:
            raise ValueError(
                f"tokens: {past} cached + {tokens.size(1)} new positions exceed max_len = "
                f"{self.max_len}; got tokens.shape = {shape_of(tokens)}"
            )
        return tokens

    def _embed(self, tokens: Tensor, past: int) -> Tensor:
        tokens = self._check_tokens(tokens, past)
        x = self.token_embedding(tokens)  # (B, T, D)
        positions = torch.arange(past, past + tokens.size(1), device=tokens.device)  # (T,)
        if self.positions == "learned":
            x = x + self.position_embedding(positions)  # (B, T, D)
        elif self.positions == "sinusoidal":
            x = x + sinusoidal_encoding(positions, x.size(-1), dtype=x.dtype)  # (B, T, D)
        additive = self.positions in ("learned", "sinusoidal")
        record("embedded", x, "B T D", "token + position embeddings" if additive else "tokens")
        return x

    def embed_at(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Token embeddings (B, T, D) of ``tokens`` (B, T) at explicit ``positions`` (B, T).

        What :meth:`forward` feeds its first block, for callers whose rows sit at different
        positions (a serving engine batching sequences of different lengths): learned or
        sinusoidal position embeddings are added at each row's own positions; with ``"rope"``,
        ``"alibi"`` or ``"none"`` the positions enter inside attention, so only the tokens are
        embedded. Positions are int64 in [0, max_len) for learned embeddings, >= 0 otherwise.
        """
        check_tensor("positions", positions, "(B, T)", rank=2)
        if positions.shape != tokens.shape:
            raise ValueError(
                f"positions: expected the shape of tokens {shape_of(tokens)}, got "
                f"{shape_of(positions)}"
            )
        limit = self.max_len if self.positions == "learned" else None
        if positions.numel() and (
            positions.min() < 0 or (limit is not None and positions.max() >= limit)
        ):
            expected = f"[0, max_len = {limit})" if limit is not None else ">= 0"
            raise ValueError(
                f"positions: expected values in {expected}, got values from "
                f"{positions.min().item()} to {positions.max().item()}"
            )
        x = self.token_embedding(self._check_tokens(tokens, 0))  # (B, T, D)
        if self.positions == "learned":
            x = x + self.position_embedding(positions)  # (B, T, D)
        elif self.positions == "sinusoidal":
            table = sinusoidal_encoding(positions.flatten(), x.size(-1), dtype=x.dtype)  # (BT, D)
            x = x + table.view_as(x)  # (B, T, D)
        return x

    def _attention_mask(
        self, query_len: int, past: int, dtype: torch.dtype, device
    ) -> Tensor | None:
        """None (plain causal attention), or with ALiBi the bias (H, T, S) for S = past + T."""
        if self.positions != "alibi":
            return None
        return alibi_bias(self.n_heads, query_len, past + query_len, dtype=dtype, device=device)

    def forward(
        self,
        tokens: Tensor,
        caches: list | None = None,
        *,
        head_mask: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, T, V) for token ids (B, T); see the class docstring for ``caches``.

        ``head_mask`` (L, H) gates every head of every layer (Michel et al.'s xi): row l is
        passed to layer l's attention. Float, in the model's dtype; differentiable.
        ``mask``: a boolean (T, S) mask, True = attend, S = cached + T, that replaces the
        causal mask in every layer, such as :func:`attnbook.sliding_window_mask` or
        :func:`attnbook.streaming_mask`; it should be causal itself. Refused with ALiBi, which
        brings its own mask.
        """
        if caches is not None and len(caches) != len(self.blocks):
            kind = type(self.blocks[0].attention.new_cache()).__name__
            raise ValueError(f"caches: expected {len(self.blocks)} {kind}, got {len(caches)}")
        self._check_head_mask(head_mask)
        past = 0 if caches is None else len(caches[0])
        x = self._embed(tokens, past)  # (B, T, D)
        if mask is None:
            mask = self._attention_mask(tokens.size(1), past, x.dtype, x.device)  # (H, T, S)
        else:
            mask = self._check_mask(mask, tokens.size(1), past).to(x.device)  # (T, S)
        for index, block in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
            layer_mask = None if head_mask is None else head_mask[index]  # (H,)
            x = block(x, cache, head_mask=layer_mask, mask=mask)  # (B, T, D)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        record("logits", logits, "B T V", "a score for every vocabulary entry (V)")
        return logits

    def _check_mask(self, mask: object, query_len: int, past: int) -> Tensor:
        """A boolean (T, S) mask for S = past + T, on a model without ALiBi."""
        if self.positions == "alibi":
            raise ValueError("mask: an ALiBi model builds its own mask; use one without ALiBi")
        expected = (query_len, past + query_len)
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != expected:
            got = f"{mask.dtype} {shape_of(mask)}" if isinstance(mask, Tensor) else type(mask)
            raise ValueError(f"mask: expected a boolean (T, S) = {expected} mask, got {got}")
        return mask

    def _check_head_mask(self, head_mask: Tensor | None) -> None:
        expected = (len(self.blocks), self.blocks[0].attention.n_heads)
        if head_mask is not None and (
            not isinstance(head_mask, Tensor) or tuple(head_mask.shape) != expected
        ):
            got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else type(head_mask)
            raise ValueError(f"head_mask: expected shape (L, H) = {expected}, got {got}")

    def forward_with_weights(
        self, tokens: Tensor, *, head_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits (B, T, V) and every layer's weights (L, B, H, T, T) for ``tokens`` (B, T).

        The explicit path, so the weights exist; ``head_mask`` (L, H) as in :meth:`forward`. A
        gated head still has weights (what it *would* attend to), and layer l + 1's weights see
        what the gated layer l wrote.
        """
        self._check_head_mask(head_mask)
        x = self._embed(tokens, 0)  # (B, T, D)
        mask = self._attention_mask(tokens.size(1), 0, x.dtype, x.device)  # (H, T, T) or None
        layer_weights = []
        for index, block in enumerate(self.blocks):
            gates = None if head_mask is None else head_mask[index]  # (H,)
            x, weights = block.forward_with_weights(
                x, need_weights=True, head_mask=gates, mask=mask
            )  # (B, T, D), (B, H, T, T)
            layer_weights.append(weights)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        return logits, torch.stack(layer_weights)  # (B, T, V), (L, B, H, T, T)

    @torch.no_grad()
    def attention_weights(self, tokens: Tensor) -> Tensor:
        """The causal attention weights of every layer for ``tokens`` (B, T): (L, B, H, T, T)."""
        return self.forward_with_weights(tokens)[1]


@torch.no_grad()
def greedy_generate(
    model: TinyDecoder, prompt: Tensor, n_new: int, *, use_cache: bool = True
) -> tuple[Tensor, Tensor]:
    """Greedy decoding: append the most likely next token ``n_new`` times.

    prompt: token ids (B, T0), T0 >= 1, every row a whole prompt. Returns (tokens
    (B, T0 + n_new), logits (B, n_new, V)), the logits each new token was chosen from.
    ``use_cache=False`` runs the model over the whole sequence at every step (recomputation);
    ``use_cache=True`` runs the prompt once (prefill) and then only the newest token, reading
    earlier keys and values from a cache per layer. Both choose the same tokens; the logits
    agree to rounding. Only a model with learned positions is limited to ``max_len``.

    Padding is not supported: a padded row would be decoded as if its pad tokens were text, so
    a batch must hold prompts of one length. Prompts given as a list of 1-D tensors are stacked,
    and a list of different lengths is refused; generate those one by one.
    """
    check_int("n_new", n_new)
    if isinstance(prompt, list | tuple):
        lengths = [len(row) for row in prompt]
        if len(set(lengths)) > 1:
            raise ValueError(
                f"prompt: prompts of lengths {lengths} cannot share a batch (padding would be "
                f"read as text); generate them one by one or group prompts of equal length"
            )
        prompt = torch.stack(list(prompt))  # (B, T0)
    check_tensor("prompt", prompt, "(B, T0)", rank=2)
    if prompt.size(1) == 0:
        raise ValueError(
            f"prompt: expected at least one token per row, got prompt.shape = {shape_of(prompt)}"
        )
    too_long = prompt.size(1) + n_new - 1 > model.max_len  # the last new token is never fed back
    if model.positions == "learned" and too_long:
        raise ValueError(
            f"n_new: a {prompt.size(1)}-token prompt and {n_new} new tokens need "
            f"{prompt.size(1) + n_new - 1} positions, more than max_len = {model.max_len}"
        )
    caches = model.new_caches() if use_cache else None
    # The model checks the prompt's ids at the first step; the output holds them as int64.
    tokens, step_input, step_logits = prompt.long(), prompt, []
    for _ in range(n_new):
        logits = model(step_input, caches)[:, -1]  # (B, V): the last position's scores
        next_token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)  # (B, T0 + steps so far)
        step_input = next_token if use_cache else tokens  # (B, 1) or (B, T0 + steps so far)
        step_logits.append(logits)
    return tokens, torch.stack(step_logits, dim=1)  # (B, T0 + n_new), (B, n_new, V)
