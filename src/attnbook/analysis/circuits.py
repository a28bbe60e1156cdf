"""Three scores that name what a head of causal self-attention does.

Each takes attention weights ``(..., T, T)`` (queries as rows, keys as columns) and returns
one number per leading index, shape ``weights.shape[:-2]``: the mean, over the queries that
have such a key, of the weight on

- :func:`previous_token_score`: key ``t - 1`` (queries ``t = 1 .. T - 1``);
- :func:`induction_score`: key ``t - period + 1``, the token *after* the earlier occurrence of
  the current token in a sequence that repeats with period ``period`` (queries
  ``t = period .. T - 1``); Olsson et al.'s prefix-matching score;
- :func:`sink_score`: key 0, the first position (queries ``t = 1 .. T - 1``; query 0 can only
  look at itself).

Under a head that spreads its weight evenly over the keys it may see, query ``t`` gives each
key ``1 / (t + 1)``: that is the level each score has by chance. For sequences that start with
a BOS token, pass the weights the score means: ``weights[..., 1:, 1:]`` to score the repeated
tokens alone.

The second half of the module holds chapter 14's experiment on the sequences of
:mod:`attnbook.models.periodic`: its model (:func:`build_circuit_model`), a forward pass with
head gates that keeps every layer's weights (:func:`gated_forward`), the measurements taken
during training (:func:`circuit_measurements`), layer-0 heads removed from some of layer 1's
inputs only (:func:`composition_measurements`) or replaced by their mean
(:func:`mean_ablation_measurements`), and the shipped snapshots (:func:`load_circuit_models`,
made by ``scripts/train_circuit_models.py``).
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from attnbook.core._checks import check_floating, check_tensor, shape_of
from attnbook.models.decoder import TinyDecoder
from attnbook.models.periodic import SEQUENCE_LENGTH, VOCAB_SIZE
from attnbook.models.shipped import (
    check_sha256,
    manifest_fields,
    read_manifest,
    read_shipped,
    read_state_dict,
)


def _check_weights(weights: object) -> int:
    """``weights`` is a floating (..., T, T) tensor with T >= 2; returns T."""
    check_tensor("weights", weights, "(..., T, T)")
    check_floating("weights", weights)
    length, keys = weights.shape[-2:]
    if length != keys:
        raise ValueError(
            f"weights: expected square causal self-attention weights (..., T, T), got "
            f"weights.shape = {shape_of(weights)}"
        )
    if length < 2:
        raise ValueError(
            f"weights: expected T >= 2 (query 1 is the first with an earlier key), got "
            f"weights.shape = {shape_of(weights)}"
        )
    return length


def _check_period(period: object, length: int, lead: torch.Size) -> Tensor:
    """``period`` as an integer tensor broadcast to ``lead``, every value in 1 .. T - 1."""
    expected = (
        f"an int or an integer tensor broadcastable to {tuple(lead)} with values in "
        f"[1, {length - 1}]"
    )
    if isinstance(period, bool) or not isinstance(period, int | Tensor):
        raise ValueError(f"period: expected {expected}, got {type(period).__name__}")
    if isinstance(period, int) and period.bit_length() > 63:  # more than int64 can hold
        raise ValueError(f"period: expected {expected}, got {period}")
    if isinstance(period, Tensor) and (
        period.dtype.is_floating_point or period.dtype.is_complex or period.dtype == torch.bool
    ):
        raise ValueError(f"period: expected {expected}, got dtype {period.dtype}")
    period = torch.as_tensor(period)
    try:
        period = period.broadcast_to(lead)
    except RuntimeError:
        raise ValueError(
            f"period: expected {expected}, got period.shape = {shape_of(period)}"
        ) from None
    if period.numel() and (period.min() < 1 or period.max() > length - 1):
        raise ValueError(
            f"period: expected {expected}, got values from {period.min().item()} to "
            f"{period.max().item()}"
        )
    return period


def previous_token_score(weights: Tensor) -> Tensor:
    """Mean weight on key t - 1 over queries t = 1 .. T - 1: shape ``weights.shape[:-2]``."""
    _check_weights(weights)
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # (...,)


def induction_score(weights: Tensor, period: int | Tensor) -> Tensor:
    """Mean weight on key t - period + 1 over queries t = period .. T - 1.

    ``period``: an int, or an integer tensor broadcastable to ``weights.shape[:-2]`` (one
    period per sequence: shape (B, 1) for (B, H, T, T) weights). Returns shape
    ``weights.shape[:-2]``.
    """
    length = _check_weights(weights)
    lead = weights.shape[:-2]
    period = _check_period(period, length, lead).to(weights.device)  # (...,)
    queries = torch.arange(length, device=weights.device)  # (T,)
    keys = queries - period[..., None] + 1  # (..., T)
    valid = keys >= 1  # queries t >= period
    on_key = weights.gather(-1, keys.clamp(min=0)[..., None]).squeeze(-1)  # (..., T)
    total = torch.where(valid, on_key, 0.0).sum(dim=-1)  # (...,): rows t < period never read
    return total / valid.sum(dim=-1)  # (...,)


def sink_score(weights: Tensor) -> Tensor:
    """Mean weight on key 0 over queries t = 1 .. T - 1: shape ``weights.shape[:-2]``."""
    _check_weights(weights)
    return weights[..., 1:, 0].mean(dim=-1)  # (...,)


# The circuit models of chapter 14: periodic random sequences and small attention-only decoders.

MODEL_CONFIG = {
    "vocab_size": VOCAB_SIZE + 1,
    "d_model": 64,
    "n_heads": 4,
    "n_layers": 2,
    "max_len": SEQUENCE_LENGTH,
    "attention_only": True,
}
WEIGHTS = "circuit_models.pt"
MANIFEST = "circuit_models.json"
REGENERATE = "python scripts/train_circuit_models.py"


def build_circuit_model() -> TinyDecoder:
    """A fresh attention-only TinyDecoder of chapter 14's size (2 layers, 4 heads, D = 64)."""
    return TinyDecoder(**MODEL_CONFIG)


def gated_forward(
    model: TinyDecoder, tokens: Tensor, head_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Logits (B, T, V) and every layer's weights (L, B, H, T, T), heads gated by head_mask.

    ``head_mask`` (L, H): 0 removes a head's output from the residual stream (it still has
    weights: what it *would* attend to). Layer l + 1's weights see what the gated layer l wrote.
    The chapter's name for :meth:`attnbook.TinyDecoder.forward_with_weights`.
    """
    return model.forward_with_weights(tokens, head_mask=head_mask)


@torch.no_grad()
def _next_token_losses(logits: Tensor, tokens: Tensor) -> Tensor:
    """(B, T - 1): the loss of predicting token t + 1 at position t, from logits (B, T, V)."""
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")


def circuit_measurements(
    model: TinyDecoder, tokens: Tensor, period: int, head_mask: Tensor | None = None
) -> dict[str, Tensor]:
    """Losses and head scores of ``model`` on sequences: a first token, then r(period) repeated.

    ``tokens`` (B, T): every row a first token, then a block of ``period`` tokens repeated at
    least twice, as :func:`attnbook.periodic_batch` makes them. Returns ``loss_first``, the mean
    loss on the first block's tokens, which nothing predicts (chance is ln 64); ``loss_repeated``,
    on the tokens from the second block's second on, which an earlier occurrence predicts;
    and (L, H) tensors averaged over the batch: ``previous`` and ``induction`` on the
    repeated tokens (``weights[..., 1:, 1:]``), ``sink_first``, the weight on position 0
    from the first block's queries (which mostly have no earlier match: a token can repeat
    inside the block by chance), and ``sink_repeated``, from the later queries.
    """
    logits, weights = gated_forward(model, tokens, head_mask)  # (B, T, V), (L, B, H, T, T)
    losses = _next_token_losses(logits, tokens)  # (B, T - 1)
    body = weights[..., 1:, 1:]  # (L, B, H, T - 1, T - 1): the tokens after the first
    first_block = weights[..., : period + 1, : period + 1]  # queries 1 .. period
    return {
        "loss_first": losses[:, :period].mean().item(),
        "loss_repeated": losses[:, period + 1 :].mean().item(),
        "previous": previous_token_score(body).mean(dim=1),  # (L, H)
        "induction": induction_score(body, period).mean(dim=1),  # (L, H)
        "sink_first": sink_score(first_block).mean(dim=1),  # (L, H)
        "sink_repeated": weights[..., period + 1 :, 0].mean(dim=(1, 3)),  # (L, H)
    }


COMPOSITION_INPUTS = ("query", "key", "value")


@torch.no_grad()
def composition_measurements(
    model: TinyDecoder,
    tokens: Tensor,
    period: int,
    heads: list[int],
    inputs: tuple[str, ...],
) -> dict[str, float | Tensor]:
    """Layer 0's ``heads`` removed from some of layer 1's inputs only: which side composes.

    Layer 1 reads the residual stream three times, for its queries, keys and values. Here
    the stream layer 1 reads for each name in ``inputs`` (a subset of ``"query"``, ``"key"``,
    ``"value"``) lacks layer 0's ``heads`` (gated off as in :func:`gated_forward`); its other
    inputs, and the stream that carries on to the logits, keep them. Returns
    ``loss_repeated`` (as in :func:`circuit_measurements`), ``induction``, layer 1's
    induction score per head (H,), on ``tokens`` (B, T) that repeat with ``period``, the
    ``logits`` (B, T, V) and layer 1's attention ``weights`` (B, H, T, T).
    """
    unknown = [name for name in inputs if name not in COMPOSITION_INPUTS]
    if isinstance(inputs, str) or unknown:
        raise ValueError(
            f"inputs: expected a tuple of names from {COMPOSITION_INPUTS}, got {inputs!r}"
        )
    first, second = model.blocks[0], model.blocks[1]
    x, gates = _embedded_and_gates(model, tokens, heads)  # (B, T, D), (H,)
    stream = first(x)  # (B, T, D): after layer 0, every head
    kept = second.attention_norm(stream)  # (B, T, D): layer 1's input, every head
    removed = second.attention_norm(first(x, head_mask=gates))  # (B, T, D): without heads
    query, key, value = (removed if name in inputs else kept for name in COMPOSITION_INPUTS)
    attended, weights = second.attention(
        query, key, value, is_causal=True, need_weights=True
    )  # (B, T, D), (B, H, T, T)
    x = stream + attended  # (B, T, D): the stream itself keeps every layer-0 head
    if second.mlp is not None:
        x = x + second.mlp(second.mlp_norm(x))  # (B, T, D)
    logits, measured = _after_layer_1(model, x, weights, tokens, period)  # (B, T, V)
    return measured | {"logits": logits, "weights": weights}  # weights: layer 1's


def _after_layer_1(
    model: TinyDecoder, x: Tensor, weights: Tensor, tokens: Tensor, period: int
) -> tuple[Tensor, dict[str, float | Tensor]]:
    """The logits (B, T, V) from layer 1's output ``x`` (B, T, D), and what both measures
    report: ``loss_repeated`` and layer 1's ``induction`` per head (H,) from its ``weights``."""
    for block in model.blocks[2:]:
        x = block(x)  # (B, T, D)
    logits = model.lm_head(model.final_norm(x))  # (B, T, V)
    losses = _next_token_losses(logits, tokens)  # (B, T - 1)
    return logits, {
        "loss_repeated": losses[:, period + 1 :].mean().item(),
        "induction": induction_score(weights[..., 1:, 1:], period).mean(dim=0),  # (H,)
    }


def _embedded_and_gates(model: TinyDecoder, tokens: Tensor, heads: list[int]) -> tuple:
    """The first block's input (B, T, D) and layer-0 gates (H,) that are 0 for ``heads``."""
    n_heads = model.blocks[0].attention.n_heads
    if any(not isinstance(h, int) or not 0 <= h < n_heads for h in heads):
        raise ValueError(f"heads: expected layer-0 head indices in [0, {n_heads}), got {heads}")
    positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)  # (B, T)
    x = model.embed_at(tokens, positions)  # (B, T, D)
    gates = torch.ones(n_heads, dtype=x.dtype, device=x.device)  # (H,)
    gates[list(heads)] = 0.0
    return x, gates


@torch.no_grad()
def mean_ablation_measurements(
    model: TinyDecoder, tokens: Tensor, period: int, heads: list[int]
) -> dict[str, float | Tensor]:
    """Layer 0's ``heads`` mean-ablated: their output replaced by its average over the batch.

    At each position, what ``heads`` add to the residual stream is replaced by its mean over
    the B sequences of ``tokens`` (B, T), so later layers see a stream of the usual size that
    says nothing about this sequence; :func:`gated_forward`'s gates replace it by zero.
    Returns ``loss_repeated`` and layer 1's ``induction`` score per head (H,), as
    :func:`composition_measurements` does, on ``tokens`` that repeat with ``period``.
    """
    x, gates = _embedded_and_gates(model, tokens, heads)  # (B, T, D), (H,)
    first = model.blocks[0]
    without = first(x, head_mask=gates)  # (B, T, D): the heads' output zeroed
    written = first(x) - without  # (B, T, D): what the heads add
    x = without + written.mean(dim=0)  # (B, T, D): their average at each position instead
    x, weights = model.blocks[1].forward_with_weights(x, need_weights=True)  # weights (B, H, T, T)
    return _after_layer_1(model, x, weights, tokens, period)[1]


def _check_layer_head(model: TinyDecoder, layer: int, head: int) -> None:
    if not 0 <= layer < len(model.blocks) or not 0 <= head < model.n_heads:
        raise ValueError(
            f"layer, head: expected a layer in [0, {len(model.blocks)}) and a head in "
            f"[0, {model.n_heads}), got layer = {layer}, head = {head}"
        )


def _check_n_tokens(model: TinyDecoder, n_tokens: int) -> None:
    if not 1 <= n_tokens <= model.vocab_size:
        raise ValueError(f"n_tokens: expected 1 .. {model.vocab_size}, got {n_tokens}")


def _token_inputs(model: TinyDecoder, n_tokens: int) -> Tensor:
    """(N, D): tokens 0 .. n_tokens - 1 embedded, plus the mean position embedding."""
    embedded = model.token_embedding.weight[:n_tokens]  # (N, D)
    if model.position_embedding is not None:
        embedded = embedded + model.position_embedding.weight.mean(dim=0)  # (N, D)
    return embedded


def _ov_writes(model: TinyDecoder, layer: int, heads: list[int], n_tokens: int) -> Tensor:
    """(N, D): what ``heads`` of ``layer`` add to the stream, summed, on attending to token a.

    Each head's value projection of token a's input (normalised as the layer normalises its
    input), then its slice of the output projection; the output bias, shared by all heads,
    is left out.
    """
    block = model.blocks[layer]
    attention = block.attention
    head_dim = attention.head_dim
    values = attention.v_proj(block.attention_norm(_token_inputs(model, n_tokens)))
    # values: (N, H_kv * d_head)
    written = values.new_zeros(n_tokens, attention.out_proj.out_features)  # (N, D)
    for head in heads:
        kv_head = head // (attention.n_heads // attention.n_kv_heads)
        value = values[:, kv_head * head_dim : (kv_head + 1) * head_dim]  # (N, d_head)
        out_weight = attention.out_proj.weight[:, head * head_dim : (head + 1) * head_dim]
        written = written + value @ out_weight.T  # (N, D)
    return written


@torch.no_grad()
def ov_logits(model: TinyDecoder, layer: int, head: int, n_tokens: int) -> Tensor:
    """What one head writes when it attends to token a: logits (n_tokens, V), row a.

    The head's value and output projections applied to token a's embedding (plus the mean
    position embedding, normalised as the layer normalises its input), then the final
    LayerNorm's centring and scale and the unembedding: the head's OV circuit read as logits
    (Elhage et al., 2021), for tokens ``0 .. n_tokens - 1``. A copying head puts the largest
    entry of row a in column a. It leaves out what earlier layers add to the stream and the
    final LayerNorm's division by the stream's spread (one positive factor per position,
    which keeps each row's order), so it describes the head's weights, not a forward pass.
    """
    _check_layer_head(model, layer, head)
    _check_n_tokens(model, n_tokens)
    written = _ov_writes(model, layer, [head], n_tokens)  # (N, D)
    centred = written - written.mean(dim=-1, keepdim=True)  # (N, D)
    return (centred * model.final_norm.weight) @ model.lm_head.weight.T  # (N, V)


@torch.no_grad()
def k_composition_scores(model: TinyDecoder, heads: list[int], head: int, n_tokens: int) -> Tensor:
    """Layer 1's QK circuit read through layer 0's OV circuits: scores (n_tokens, n_tokens).

    Row a, column b: the attention score (before softmax) that layer 1's ``head`` gives, at
    a query whose token is a, to a key position at which layer 0's ``heads`` attended to
    token b and wrote what their OV circuits write for it (:func:`ov_logits`' first step,
    summed over ``heads``). For a previous-token head, b is the key's previous token, so an
    induction head that matches "the previous token was my token" (K-composition, Elhage et
    al., 2021) puts a bright diagonal here. The query is token a's embedding plus the mean
    position, normalised by layer 1's LayerNorm; the key is the linear part of that
    LayerNorm (centring and scale, not the division by the stream's spread) applied to what
    layer 0 wrote, alone (what the key's own token adds is left out, and so is the key bias,
    which adds one constant to each row). Weights only, not a forward pass.
    """
    if len(model.blocks) < 2:
        raise ValueError(f"model: expected at least 2 layers, got {len(model.blocks)}")
    for earlier in heads:
        _check_layer_head(model, 0, earlier)
    _check_layer_head(model, 1, head)
    _check_n_tokens(model, n_tokens)
    block = model.blocks[1]
    attention = block.attention
    head_dim = attention.head_dim
    kv_head = head // (attention.n_heads // attention.n_kv_heads)
    queries = _token_inputs(model, n_tokens)  # (N, D)
    query = attention.q_proj(block.attention_norm(queries))  # (N, H * d_head)
    query = query[:, head * head_dim : (head + 1) * head_dim]  # (N, d_head)
    written = _ov_writes(model, 0, list(heads), n_tokens)  # (N, D)
    centred = written - written.mean(dim=-1, keepdim=True)  # (N, D)
    key_weight = attention.k_proj.weight[kv_head * head_dim : (kv_head + 1) * head_dim]
    key = (centred * block.attention_norm.weight) @ key_weight.T  # (N, d_head)
    return query @ key.T / head_dim**0.5  # (N, N)


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, REGENERATE)


def load_circuit_models() -> tuple[dict[str, TinyDecoder], dict]:
    """Chapter 14's shipped snapshots as eval-mode models, and the manifest with the curves.

    The keys name a run and a step, e.g. ``"random/200"``; the weights are stored in float16
    (to keep ``data/`` small) and loaded as float32. The file's sha256 is checked first.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), REGENERATE)
    data = _read_shipped(WEIGHTS)
    with manifest_fields(MANIFEST, REGENERATE):
        check_sha256(WEIGHTS, data, manifest["sha256"], REGENERATE)
    models = {}
    for name, state in read_state_dict(data).items():
        model = build_circuit_model()
        model.load_state_dict({key: value.float() for key, value in state.items()})
        models[name] = model.eval()
    return models, manifest
