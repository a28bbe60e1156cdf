"""What the heads of a trained decoder do: where they look, how much each matters, pruning.

Everything here reads a model through its public interface: ``attention_weights(tokens)``
(L, B, H, T, T) and ``forward(tokens, head_mask=...)`` with gates of shape (L, H), Michel et
al.'s xi (1 keeps a head, 0 removes it). Weights follow the book's convention: queries as rows,
keys as columns, causal (query i sees keys 0..i).

:func:`seed_spread` and :func:`supported_orderings` compare configurations trained with several
seeds, such as head counts: mean, sample standard deviation, and which rankings the spread
supports.
"""

import math
import statistics

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnbook.core._checks import check_int, check_tensor, shape_of

SPACES = frozenset(" \n")
PUNCTUATION = frozenset(".,;:!?'()")

# A head's role is the statistic that takes at least this share of its attention.
ROLE_THRESHOLD = 0.5
# A head stands out on a kind of key when its share is at least this many times chance.
STANDOUT_RATIO = 2.0
# Shares whose chance level depends on how far back a head looks: judged against the head's
# own weight on key i - 2 (``two_back``), the nearest key that is neither of them.
LOCAL_SHARES = ("previous", "current")
ROLES = {
    "previous": "previous character",
    "current": "current character",
    "first": "first position",
    "space": "spaces and newlines",
    "punctuation": "punctuation marks",
    "capital": "capital letters",
    "induction": "induction (after an earlier copy)",
}


def _mean_over_queries(values: Tensor, valid: Tensor) -> Tensor:
    """Average (L, B, H, T) over B and the valid queries (B, T) -> (L, H)."""
    weights = valid[None, :, None, :].to(values.dtype)  # (1, B, 1, T)
    return (values * weights).sum(dim=(1, 3)) / weights.sum(dim=(1, 3)).clamp(min=1)


def _check_token_ids(name: str, tokens: object, layout: str = "(B, T)") -> None:
    """Token ids: a (B, T) tensor of an integer dtype."""
    check_tensor(name, tokens, layout, rank=2)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name}: expected integer token ids, got dtype {tokens.dtype}")


def induction_targets(tokens: Tensor) -> Tensor:
    """(B, T, T) bool: key j is the character after an earlier occurrence of query i's character.

    That is tokens[j - 1] == tokens[i] with 1 <= j < i: the key an induction head looks at to
    predict that what followed the earlier copy comes next. Key j = i (the query's own
    position, when the previous character equals the current one, as in "ll") is left out:
    looking at the current character is the ``current`` statistic, not copying.
    """
    _check_token_ids("tokens", tokens)
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): tokens[i] == tokens[j]
    shifted = torch.zeros_like(same)
    shifted[:, :, 1:] = same[:, :, :-1]  # (B, T, T): tokens[i] == tokens[j - 1]
    earlier = torch.ones_like(same[0]).tril(diagonal=-1)  # (T, T): j < i
    return shifted & earlier  # (B, T, T)


def head_statistics(weights: Tensor, tokens: Tensor, characters: list[str]) -> dict[str, Tensor]:
    """Per-head averages over a batch of windows, each (L, H).

    weights (L, B, H, T, T) from ``attention_weights``, tokens (B, T), ``characters`` the
    vocabulary (id -> character). Statistics, averaged over windows and queries:
    ``distance`` (mean i - j under the weights), ``entropy`` (nats), ``previous`` (weight on
    key i - 1), ``current`` (on key i), ``two_back`` (on key i - 2), ``first`` (on key 0),
    ``space`` (on spaces and newlines), ``punctuation`` (on ``PUNCTUATION``), ``capital`` (on
    upper-case letters), ``induction`` (on the keys
    :func:`induction_targets` marks, over the queries that have one). Queries 0 (and 1 for
    ``first`` and ``two_back``) are left out where the statistic is trivial or has no key.
    """
    _check_statistics_inputs(weights, tokens, characters)
    tokens = tokens.long()  # an index: uint8 or bool ids would be read as a mask
    length = weights.size(-1)
    positions = torch.arange(length, device=weights.device)
    distance = (positions[:, None] - positions[None, :]).clamp(min=0).to(weights.dtype)  # (T, T)
    kinds = {
        "space": [c in SPACES for c in characters],
        "punctuation": [c in PUNCTUATION for c in characters],
        "capital": [c.isupper() for c in characters],
    }
    # kind -> (B, T) bool: which keys are of that kind
    keys_of = {
        kind: torch.tensor(marks, device=tokens.device)[tokens] for kind, marks in kinds.items()
    }
    induction = induction_targets(tokens)  # (B, T, T)
    all_queries = torch.ones_like(tokens, dtype=torch.bool)  # (B, T)
    after_first = all_queries.clone()
    after_first[:, :2] = False
    after_zero = all_queries.clone()
    after_zero[:, 0] = False
    diagonal = weights.diagonal(dim1=-2, dim2=-1)  # (L, B, H, T)
    previous = F.pad(weights.diagonal(offset=-1, dim1=-2, dim2=-1), (1, 0))  # (L, B, H, T)
    two_back = F.pad(weights.diagonal(offset=-2, dim1=-2, dim2=-1), (2, 0))  # (L, B, H, T)
    entropy = -(weights * weights.clamp(min=1e-12).log()).sum(-1)  # (L, B, H, T)
    on_kind = {
        kind: _mean_over_queries((weights * keys[None, :, None, None, :]).sum(-1), after_zero)
        for kind, keys in keys_of.items()
    }
    return {
        "distance": _mean_over_queries((weights * distance).sum(-1), all_queries),
        "entropy": _mean_over_queries(entropy, all_queries),
        "previous": _mean_over_queries(previous, after_zero),
        "current": _mean_over_queries(diagonal, after_zero),
        "two_back": _mean_over_queries(two_back, after_first),
        "first": _mean_over_queries(weights[..., 0], after_first),
        **on_kind,
        "induction": _mean_over_queries(
            (weights * induction[None, :, None]).sum(-1), induction.any(-1)
        ),
    }


def positional_baseline(weights: Tensor, keys: Tensor) -> Tensor:
    """(L, H): the share of each head on the marked keys if its weights read positions only.

    weights (L, B, H, T, T) from ``attention_weights``, causal, with B >= 2 windows; keys
    (B, T) bool marks the keys of one kind (capitals, say). Window b is scored under the head's
    weights averaged over the *other* windows, which know where window b's queries and keys sit
    but not what its characters are: the share a head that looks by position alone (near, far,
    on duty at some positions) would give the kind. Averaged over windows and queries 1 .. T - 1,
    as the shares of :func:`head_statistics`; a head whose weights are the same in every window
    gets exactly its own share.
    """
    check_tensor("weights", weights, "(L, B, H, T, T)", rank=5)
    batch, length = weights.size(1), weights.size(-1)
    if weights.size(-2) != length or batch < 2 or length < 2:
        raise ValueError(
            f"weights: expected causal self-attention weights (L, B, H, T, T) with T = S >= 2 "
            f"and B >= 2 windows, got weights.shape = {shape_of(weights)}"
        )
    check_tensor("keys", keys, "(B, T)", rank=2)
    if keys.dtype != torch.bool or keys.shape != (batch, length):
        raise ValueError(
            f"keys: expected a bool mask (B, T) = ({batch}, {length}), got dtype {keys.dtype} "
            f"and shape {shape_of(keys)}"
        )
    # (L, B, H, T, T): each window's weights replaced by the mean of the other windows'
    others = (weights.sum(dim=1, keepdim=True) - weights) / (batch - 1)
    on_keys = (others * keys[None, :, None, None, :].to(weights.dtype)).sum(-1)  # (L, B, H, T)
    after_zero = torch.ones_like(keys)
    after_zero[:, 0] = False
    return _mean_over_queries(on_keys, after_zero)  # (L, H)


def offset_profile(weights: Tensor, max_offset: int) -> Tensor:
    """(L, H, max_offset + 1): each head's mean weight on key i - k, for k = 0 .. max_offset.

    weights (L, B, H, T, T) from ``attention_weights``, causal. Entry k averages weights[i, i - k]
    over the windows and the queries that have such a key (i >= k), query 0 left out as in
    :func:`head_statistics`, whose ``current``, ``previous`` and ``two_back`` are entries 0, 1
    and 2. A head that picks out the previous character has one tall entry at k = 1; a local
    head, several entries that fall off slowly; a broad one, a low, flat profile.
    """
    check_tensor("weights", weights, "(L, B, H, T, T)", rank=5)
    length = weights.size(-1)
    if weights.size(-2) != length or weights.size(1) == 0 or length < 2:
        raise ValueError(
            f"weights: expected causal self-attention weights (L, B, H, T, T) with T = S >= 2 "
            f"and B >= 1, got weights.shape = {shape_of(weights)}"
        )
    check_int("max_offset", max_offset, low=0, high=length - 1)
    profile = []
    for offset in range(max_offset + 1):
        # (L, B, H, T - offset): weights[i, i - offset] for i = offset .. T - 1
        diagonal = weights.diagonal(offset=-offset, dim1=-2, dim2=-1)
        first_query = max(offset, 1) - offset  # skip query 0
        profile.append(diagonal[..., first_query:].mean(dim=(1, 3)))  # (L, H)
    return torch.stack(profile, dim=-1)  # (L, H, max_offset + 1)


PLAIN_ATTENTION = {"rope": False, "qk_norm": None, "window": None, "logit_softcap": None}


@torch.no_grad()
def position_only_scores(model: nn.Module) -> Tensor:
    """Layer 0's causal scores (H, T, T), T = ``max_len``, from the position embeddings alone.

    Layer 0 reads x_t = e(token_t) + p_t. Here every token embedding is replaced by their mean
    over the vocabulary, so the input at position t, mean(e) + p_t, is the same for any text.
    Row t, column s is q(t) . k(s) times the layer's scale (1 / sqrt(d_head) by default), with
    q and k each head's query and key projections of that input after the block's LayerNorm;
    keys after the query are -inf, so ``softmax(-1)`` gives the weights a text whose every
    token embedded as the mean would get. Comparing them with the weights on real text says
    how much of where layer 0 looks the positions decide on their own. ``model``: a
    :class:`attnbook.TinyDecoder` with learned positions and plain softmax attention in
    layer 0 (no rotary, QK-norm, window, soft-capping or sinks).
    """
    if getattr(model, "positions", None) != "learned":
        raise ValueError(
            f"model: expected learned position embeddings, got positions = "
            f"{getattr(model, 'positions', None)!r}"
        )
    block = model.blocks[0]
    attention = block.attention
    options = {name: getattr(attention, name, "missing") for name in PLAIN_ATTENTION}
    if options != PLAIN_ATTENTION or getattr(attention, "sinks", None) is not None:
        raise ValueError(
            f"model: expected plain softmax attention in layer 0 ({PLAIN_ATTENTION}, no "
            f"sinks), got {options}"
        )
    n_heads, n_kv_heads, head_dim = attention.n_heads, attention.n_kv_heads, attention.head_dim
    positions = model.position_embedding.weight  # (T, D)
    x = block.attention_norm(positions + model.token_embedding.weight.mean(dim=0))  # (T, D)
    q = attention.q_proj(x).unflatten(-1, (n_heads, head_dim)).transpose(0, 1)  # (H, T, d_head)
    k = attention.k_proj(x).unflatten(-1, (n_kv_heads, head_dim)).transpose(0, 1)
    # k: (H_kv, T, d_head), each key/value head repeated for its group of query heads
    k = k.repeat_interleave(n_heads // n_kv_heads, dim=0)  # (H, T, d_head)
    scale = head_dim**-0.5 if attention.scale is None else attention.scale
    scores = q @ k.transpose(-2, -1) * scale  # (H, T, T)
    future = torch.ones_like(scores[0], dtype=torch.bool).triu(diagonal=1)  # (T, T)
    return scores.masked_fill(future, -math.inf)  # (H, T, T)


def _check_statistics_inputs(weights: object, tokens: object, characters: object) -> None:
    """weights (L, B, H, T, T), tokens (B, T) with the same B and T, ids < len(characters)."""
    check_tensor("weights", weights, "(L, B, H, T, T)", rank=5)
    if weights.size(-1) != weights.size(-2):
        raise ValueError(
            f"weights: expected causal self-attention weights (L, B, H, T, T) with as many keys "
            f"as queries, got weights.shape = {shape_of(weights)}"
        )
    if weights.size(1) == 0 or weights.size(-1) == 0:
        raise ValueError(
            f"weights: expected at least one window and one position, got weights.shape = "
            f"{shape_of(weights)}"
        )
    if not torch.isfinite(weights).all() or (weights < 0).any():
        raise ValueError(
            "weights: expected finite, non-negative attention weights, got NaN, inf or negative "
            "values"
        )
    _check_token_ids("tokens", tokens)
    batch, length = weights.size(1), weights.size(-1)
    if tokens.shape != (batch, length):
        raise ValueError(
            f"tokens: expected shape (B, T) = ({batch}, {length}) as in weights (L, B, H, T, T) "
            f"= {shape_of(weights)}, got tokens.shape = {shape_of(tokens)}"
        )
    if not isinstance(characters, list | tuple | str) or not all(
        isinstance(c, str) for c in characters
    ):
        raise ValueError(
            f"characters: expected the vocabulary as a list of strings (id -> character), got "
            f"{type(characters).__name__}"
        )
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= len(characters)):
        raise ValueError(
            f"tokens: expected ids in [0, len(characters) = {len(characters)}), got values from "
            f"{tokens.min().item()} to {tokens.max().item()}"
        )


def name_roles(statistics: dict[str, Tensor], threshold: float = ROLE_THRESHOLD) -> list[list[str]]:
    """[layer][head] -> the role whose statistic reaches ``threshold``, else ``"mixed"``.

    ``statistics`` as :func:`head_statistics` returns them; ``threshold`` in (0, 1].
    """
    missing = [key for key in ROLES if key not in statistics]
    if missing:
        raise ValueError(
            f"statistics: expected head_statistics' dict with the keys {list(ROLES)}, missing "
            f"{missing}"
        )
    if not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ValueError(f"threshold: expected a share in (0, 1], got {threshold!r}")
    shares = torch.stack([statistics[key] for key in ROLES])  # (roles, L, H)
    best, index = shares.max(dim=0)  # (L, H) each
    names = list(ROLES.values())
    return [
        [
            names[i] if share >= threshold else "mixed"
            for share, i in zip(row, row_index, strict=True)
        ]
        for row, row_index in zip(best.tolist(), index.tolist(), strict=True)
    ]


def chance_levels(statistics: dict[str, Tensor], baseline: dict[str, Tensor]) -> dict[str, Tensor]:
    """The chance level of every share in ``ROLES``, (L, H) each, for :func:`stands_out`.

    ``statistics`` as :func:`head_statistics` returns them for the heads, ``baseline`` for a
    head that spreads its weight evenly over the keys it may see. ``previous`` and ``current``
    are each judged against the head's own share on the key one step further back:
    ``previous`` (key i - 1) against ``two_back`` (key i - 2), ``current`` (key i) against
    ``previous``. A head whose weight merely fades with distance gives neighbouring keys
    similar shares, so locality alone makes it stand out on neither. The other shares are
    judged against the baseline's, broadcast to (L, H).
    """
    for name, table in (("statistics", statistics), ("baseline", baseline)):
        missing = [key for key in (*ROLES, "two_back") if key not in table]
        if missing:
            raise ValueError(
                f"{name}: expected head_statistics' dict with the keys {[*ROLES, 'two_back']}, "
                f"missing {missing}"
            )
    shape = statistics["previous"].shape
    one_step_back = {"previous": "two_back", "current": "previous"}
    return {
        key: statistics[one_step_back[key]] if key in LOCAL_SHARES else baseline[key].expand(shape)
        for key in ROLES
    }


def stands_out(share: Tensor, chance: Tensor, ratio: float = STANDOUT_RATIO) -> Tensor:
    """Bool (L, H): ``share >= ratio * chance``, for shares (L, H) and chance broadcast to it.

    One rule for every kind of key: a share counts only as a multiple of its own chance level.
    ``chance`` must be finite and >= 0 (at chance 0 any positive share stands out, a share of
    0 never does), ``ratio`` a finite number > 1.
    """
    check_tensor("share", share, "(L, H)")
    chance = torch.as_tensor(chance, dtype=share.dtype)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 1 < ratio < math.inf:
        raise ValueError(f"ratio: expected a finite number > 1, got {ratio!r}")
    if not torch.isfinite(chance).all() or (chance < 0).any():
        raise ValueError("chance: expected finite chance levels >= 0, got NaN, inf or a negative")
    try:
        chance = chance.broadcast_to(share.shape)
    except RuntimeError:
        raise ValueError(
            f"chance: expected a shape broadcastable to share.shape = {shape_of(share)}, got "
            f"{shape_of(chance)}"
        ) from None
    return (share >= ratio * chance) & (share > 0)


def _gates(model: nn.Module) -> Tensor:
    """All-ones gates (L, H) in the model's dtype and on its device: every head kept."""
    parameter = next(model.parameters())
    shape = (len(model.blocks), model.blocks[0].attention.n_heads)
    return torch.ones(shape, dtype=parameter.dtype, device=parameter.device)  # (L, H)


def _check_windows(model: nn.Module, inputs: object, targets: object) -> None:
    """inputs (B, T) and targets (B, T): at least one window and token, one target per input
    token, each a token id of the model's vocabulary."""
    _check_token_ids("inputs", inputs)
    if inputs.size(0) == 0 or inputs.size(1) == 0:
        raise ValueError(
            f"inputs: expected at least one window of at least one token (B, T >= 1), got "
            f"inputs.shape = {shape_of(inputs)}"
        )
    _check_token_ids("targets", targets)
    if targets.shape != inputs.shape:
        raise ValueError(
            f"targets: expected shape (B, T) = {shape_of(inputs)} as inputs (one target per "
            f"input token), got targets.shape = {shape_of(targets)}"
        )
    low, high = targets.long().min().item(), targets.long().max().item()
    if low < 0 or high >= model.vocab_size:
        raise ValueError(
            f"targets: expected ids in [0, vocab_size = {model.vocab_size}), got values from "
            f"{low} to {high}"
        )


def _loss(model: nn.Module, inputs: Tensor, targets: Tensor, gates: Tensor) -> Tensor:
    logits = model(inputs, head_mask=gates)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten().long())


@torch.no_grad()
def masked_loss(model: nn.Module, inputs: Tensor, targets: Tensor, gates: Tensor) -> float:
    """Mean next-token loss of inputs (B, T) vs targets (B, T) with head gates (L, H)."""
    _check_windows(model, inputs, targets)
    return _loss(model, inputs, targets, gates).item()


class _LayerByLayer:
    """Losses under head gates, each recomputed only from the lowest layer whose gates changed.

    Layer l's input depends on the gates of the layers below it alone, so the inputs of the
    layers below the first changed one are kept from the previous call and the rest recomputed:
    the same operations as ``model(inputs, head_mask=gates)`` in the same order, so the same
    losses, for a fraction of the work when successive gates differ in one layer. TinyDecoder.
    """

    def __init__(self, model: nn.Module, inputs: Tensor, targets: Tensor) -> None:
        self.model, self.targets = model, targets.flatten().long()
        x = model._embed(inputs, 0)  # (B, T, D)
        self.mask = model._attention_mask(inputs.size(1), 0, x.dtype, x.device)  # (H, T, T)
        self.layer_inputs = [x]  # [l]: what layer l read under the last gates; [L]: the output
        self.last_gates: Tensor | None = None  # (L, H)

    def query_losses(self, gates: Tensor) -> Tensor:
        """(B, T): every query's next-token loss with head gates (L, H)."""
        n_layers = len(self.model.blocks)
        if self.last_gates is None:
            start = 0
        else:
            changed = (gates != self.last_gates).any(dim=1).nonzero().flatten().tolist()
            start = changed[0] if changed else n_layers
        del self.layer_inputs[start + 1 :]
        x = self.layer_inputs[start]  # (B, T, D)
        for index in range(start, n_layers):
            x = self.model.blocks[index](x, None, head_mask=gates[index], mask=self.mask)
            self.layer_inputs.append(x)  # (B, T, D)
        self.last_gates = gates.clone()
        logits = self.model.lm_head(self.model.final_norm(x))  # (B, T, V)
        losses = F.cross_entropy(logits.flatten(0, 1), self.targets, reduction="none")
        return losses.view(x.shape[:2])  # (B, T)


@torch.no_grad()
def ablation_increase(
    model: nn.Module, inputs: Tensor, targets: Tensor, *, per_window: bool = False
) -> Tensor:
    """(L, H): the loss with one head removed (its gate 0) minus the loss with every head.

    ``per_window=True`` returns the increase of each window's mean loss instead, (B, L, H):
    their mean over the windows is the (L, H) result, their spread says how firm it is.
    """
    _check_windows(model, inputs, targets)
    if not isinstance(per_window, bool):
        raise ValueError(f"per_window: expected True or False, got {per_window!r}")
    gates = _gates(model)  # (L, H)
    layers = _LayerByLayer(model, inputs, targets)
    base = layers.query_losses(gates).mean(dim=1)  # (B,)
    increase = torch.zeros(len(inputs), *gates.shape, dtype=gates.dtype)  # (B, L, H)
    for layer, head in torch.cartesian_prod(*(torch.arange(n) for n in gates.shape)).tolist():
        gates[layer, head] = 0.0
        increase[:, layer, head] = layers.query_losses(gates).mean(dim=1) - base  # (B,)
        gates[layer, head] = 1.0
    return increase if per_window else increase.mean(dim=0)  # (B, L, H) or (L, H)


def gate_gradients(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, L, H): d loss(x) / d xi_h at xi = 1 for every window x of inputs, signed.

    One backward pass per window. Their mean over the windows, negated, is the first-order
    estimate of what removing each head costs; :func:`gradient_importance` averages their
    absolute values instead.
    """
    _check_windows(model, inputs, targets)
    gradients = []
    for window, target in zip(inputs, targets, strict=True):
        gates = _gates(model).requires_grad_()
        loss = _loss(model, window[None], target[None], gates)
        gradients.append(torch.autograd.grad(loss, gates)[0])  # (L, H)
    return torch.stack(gradients)  # (B, L, H)


def gradient_importance(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """(L, H): Michel et al.'s I_h = E_x |d loss(x) / d xi_h| at xi = 1, x one window of inputs.

    One backward pass per window (B of them): the absolute value is taken per window, before
    the mean, as in the paper.
    """
    return gate_gradients(model, inputs, targets).abs().mean(dim=0)


@torch.no_grad()
def pruning_curve(
    model: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    order: list[tuple[int, int]],
    *,
    per_window: bool = False,
) -> list[float] | Tensor:
    """Losses after removing the heads of ``order`` one by one: [every head, -1 head, ...].

    ``order`` lists distinct (layer, head) pairs, 0 <= layer < L and 0 <= head < H (no
    counting from the end), as :func:`order_by` gives them. ``per_window=True`` returns each
    window's mean loss instead, a tensor (len(order) + 1, B), so that two orders can be
    compared window by window; its mean over windows is the default curve.
    """
    _check_windows(model, inputs, targets)
    if not isinstance(per_window, bool):
        raise ValueError(f"per_window: expected True or False, got {per_window!r}")
    gates = _gates(model)  # (L, H)
    _check_order(order, *gates.shape)
    layers = _LayerByLayer(model, inputs, targets)
    losses = [layers.query_losses(gates).mean(dim=1)]  # [(B,)]
    for layer, head in order:
        gates[layer, head] = 0.0
        losses.append(layers.query_losses(gates).mean(dim=1))  # layers below `layer` kept
    if per_window:
        return torch.stack(losses)  # (len(order) + 1, B)
    return [window.mean().item() for window in losses]


def _check_order(order: object, n_layers: int, n_heads: int) -> None:
    """``order``: distinct (layer, head) pairs of ints inside an (L, H) table of heads."""
    if isinstance(order, str | bytes) or not isinstance(order, list | tuple):
        raise ValueError(
            f"order: expected a list of (layer, head) pairs, got {type(order).__name__}"
        )
    seen = set()
    for index, pair in enumerate(order):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"order[{index}]: expected a (layer, head) pair, got {pair!r}")
        check_int(f"order[{index}] layer", pair[0], low=0, high=n_layers - 1)
        check_int(f"order[{index}] head", pair[1], low=0, high=n_heads - 1)
        if tuple(pair) in seen:
            raise ValueError(
                f"order[{index}]: head {tuple(pair)} is already removed earlier in the order"
            )
        seen.add(tuple(pair))


def order_by(scores: Tensor, *, descending: bool = False) -> list[tuple[int, int]]:
    """(layer, head) pairs of an (L, H) score table, least important first by default."""
    check_tensor("scores", scores, "(L, H)", rank=2)
    if not torch.isfinite(scores).all():
        raise ValueError("scores: expected finite scores to order the heads by, got NaN or inf")
    flat = scores.flatten().argsort(descending=descending, stable=True).tolist()
    n_heads = scores.size(1)
    return [(index // n_heads, index % n_heads) for index in flat]


def seed_spread(losses: dict) -> dict:
    """Per configuration: (mean, sample standard deviation, standard error) of its seeds' losses.

    ``losses`` maps a configuration (a head count, say) to its per-seed values, at least two
    each. The standard deviation divides by n - 1; the standard error is it over sqrt(n).
    """
    if not isinstance(losses, dict):
        raise ValueError(
            f"losses: expected a dict configuration -> per-seed losses, got {type(losses).__name__}"
        )
    for key, values in losses.items():
        real = isinstance(values, list | tuple) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
        if not real:
            raise ValueError(
                f"losses: configuration {key!r} needs a list of finite numbers, got {values!r}"
            )
        if len(values) < 2:
            raise ValueError(
                f"losses: configuration {key!r} needs at least 2 seeds for a spread, got "
                f"{len(values)}"
            )
    spread = {}
    for key, values in losses.items():
        deviation = statistics.stdev(values)
        spread[key] = (statistics.fmean(values), deviation, deviation / math.sqrt(len(values)))
    return spread


def supported_orderings(losses: dict, n_standard_errors: float = 2.0) -> set[tuple]:
    """Pairs (a, b) where a's loss is lower than b's beyond the spread over seeds.

    The rule: mean_a + k se_a < mean_b - k se_b for k = ``n_standard_errors``, that is, the
    intervals mean +- k standard errors do not overlap. ``losses`` as for :func:`seed_spread`.
    """
    if (
        not isinstance(n_standard_errors, int | float)
        or not math.isfinite(n_standard_errors)
        or n_standard_errors < 0
    ):
        raise ValueError(
            f"n_standard_errors: expected a finite number >= 0, got {n_standard_errors!r}"
        )
    spread = seed_spread(losses)
    upper = {key: mean + n_standard_errors * error for key, (mean, _, error) in spread.items()}
    lower = {key: mean - n_standard_errors * error for key, (mean, _, error) in spread.items()}
    return {(a, b) for a in losses for b in losses if a != b and upper[a] < lower[b]}


def student_t_quantile(p: float, df: int) -> float:
    """Student's t with ``df`` degrees of freedom at probability ``p``, e.g. 2.36 for (0.975, 7).

    x = sqrt(df) tan(theta) turns F(t) - 1/2 into c * integral_0^theta cos^(df - 1), c =
    Gamma((df + 1) / 2) / (sqrt(pi) Gamma(df / 2)): Simpson's rule, then bisection on theta.
    """
    check_int("df", df)
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 < p < 1.0:
        raise ValueError(f"p: expected a probability strictly between 0 and 1, got {p!r}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)

    def above_half(theta: float, steps: int = 2000) -> float:  # F(sqrt(df) tan theta) - 1/2
        total = 1.0 + math.cos(theta) ** (df - 1)  # Simpson: the two ends, cos(0) = 1
        for i in range(1, steps):
            total += (4 if i % 2 else 2) * math.cos(i * theta / steps) ** (df - 1)
        return scale * total * theta / (3 * steps)

    low, high = 0.0, math.pi / 2
    while high - low > 1e-10:
        middle = (low + high) / 2
        low, high = (middle, high) if above_half(middle) < p - 0.5 else (low, middle)
    return math.sqrt(df) * math.tan((low + high) / 2)
