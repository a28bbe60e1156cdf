"""Chapter 19's experiment: dense, MoBA and indexer-selected attention on repeated sequences.

The task and the model are chapter 14's (sequences from
:func:`attnbook.models.periodic.periodic_batch`, the 2-layer, 4-head, D = 64 attention-only
``TinyDecoder``, ``MODEL_CONFIG`` below): BOS, then a random block of period P in [4, 24]
repeated to 32 tokens. Every token after the first period is predictable by an
induction circuit, which needs each query to read a few far-apart keys. Three variants each
read at most ``KEYS = 4`` of up to 33 keys per query (or all of them, for dense):

- ``dense``: causal attention over every earlier key;
- ``moba``: MoBA with blocks of 2 and top_k = 2 (the own block and one more);
- ``indexer``: the dense model, a lightning indexer per layer warmed up to the dense attention
  (KL, everything else frozen), then sparse training over its top 4 tokens.

:func:`with_choice` runs a trained dense model over the keys a rule picks, with no training
(``PROBES``: the heaviest block of 2, MoBA with blocks of 1, each head's exact top 4;
``WINDOW_PROBES``: blocks of 2 plus a sliding window of 2, as NSA adds one), to measure what a
selection rule alone costs.

``scripts/train_sparse_models.py`` trains them (two seeds) and writes ``data/sparse_models.pt``
and its manifest; :func:`load_sparse_models` reads them back.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnbook.core.masks import causal_mask, sliding_window_mask
from attnbook.models.decoder import TinyDecoder
from attnbook.models.shipped import (
    check_sha256,
    manifest_fields,
    read_manifest,
    read_shipped,
    read_state_dict,
)
from attnbook.sparse.indexer import dense_target, topk_recall, topk_tokens
from attnbook.sparse.layers import ChosenKeysAttention, IndexedSparseAttention, MoBASelfAttention
from attnbook.sparse.moba import moba_mask
from attnbook.sparse.topk import selection_mask

WEIGHTS = "sparse_models.pt"
MANIFEST = "sparse_models.json"
RETRAIN = "python scripts/train_sparse_models.py"
KINDS = ("dense", "moba", "indexer")
KEYS = 4  # the most keys a sparse query reads
SELECTION = {
    "moba": {"block_size": 2, "top_k": 2},
    "indexer": {"top_k": KEYS, "indexer_heads": 2, "indexer_dim": 16},
}
PERIODS = (4, 24)  # shortest and longest period, as chapter 14's random runs
MODEL_CONFIG = {  # chapter 14's (attnbook.analysis.circuits.MODEL_CONFIG, a higher layer)
    "vocab_size": 65,
    "d_model": 64,
    "n_heads": 4,
    "n_layers": 2,
    "max_len": 33,
    "attention_only": True,
}


class BlockAttention(nn.Module):
    """A sparse layer called the way :class:`attnbook.DecoderBlock` calls its attention.

    Plain causal self-attention only: no cache, no extra mask, no head gates (each refused).
    """

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.d_model, self.n_heads = inner.d_model, inner.n_heads

    def new_cache(self):
        raise ValueError("cache: sparse layers here run whole sequences only; got a cache request")

    def forward(self, x, mask=None, is_causal=True, need_weights=False, cache=None, head_mask=None):
        if mask is not None or not is_causal or cache is not None or head_mask is not None:
            raise ValueError(
                "mask, is_causal, cache, head_mask: a sparse layer runs causal self-attention "
                "alone; expected None, True, None, None"
            )
        return self.inner(x, need_weights)  # (B, T, D), (B, H, T, S) or None


def build_sparse_model(kind: str) -> TinyDecoder:
    """Chapter 14's model with its attention layers replaced for ``kind`` (one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    model = TinyDecoder(**MODEL_CONFIG)
    if kind == "dense":
        return model
    layer = MoBASelfAttention if kind == "moba" else IndexedSparseAttention
    d_model, n_heads = MODEL_CONFIG["d_model"], MODEL_CONFIG["n_heads"]
    for block in model.blocks:
        block.attention = BlockAttention(layer(d_model, n_heads, **SELECTION[kind]))
    return model


def with_choice(dense: TinyDecoder, choose) -> TinyDecoder:
    """A copy of the trained ``dense`` model whose every layer reads only the keys ``choose`` marks.

    ``choose(q, k, weights)`` as in :class:`attnbook.sparse.layers.ChosenKeysAttention`; the
    copy is in eval mode and untrained: it measures what the rule alone costs the dense model.
    """
    model = TinyDecoder(**MODEL_CONFIG)
    d_model, n_heads = MODEL_CONFIG["d_model"], MODEL_CONFIG["n_heads"]
    for block in model.blocks:
        block.attention = BlockAttention(ChosenKeysAttention(d_model, n_heads, choose))
    load_dense_weights(model, dense.state_dict())
    return model.eval()


def heaviest_blocks_mask(weights: Tensor, *, block_size: int, top_k: int) -> Tensor:
    """MoBA's mask with the best gate there is: (B, H, T, S) dense weights -> (B, H, T, S) bool.

    Per head and query: the own block up to the query, plus the ``top_k - 1`` earlier blocks
    that hold the most of that head's dense weight (MoBA ranks them by q . mean key instead).
    """
    query_len, key_len = weights.shape[-2:]
    key_block = torch.arange(key_len, device=weights.device) // block_size  # (S,)
    n_blocks = int(key_block[-1]) + 1
    shape = (*weights.shape[:-1], n_blocks)
    mass = weights.new_zeros(shape).index_add_(-1, key_block, weights)  # (B, H, T, n_blocks)
    own = torch.arange(query_len, device=weights.device)[:, None] // block_size  # (T, 1)
    block = torch.arange(n_blocks, device=weights.device)  # (n_blocks,)
    mass = mass.masked_fill(block > own, -1.0).masked_fill(block == own, 2.0)
    best = mass.topk(min(top_k, n_blocks), dim=-1)  # (B, H, T, top_k): own block first
    blocks = torch.where(best.values >= 0, best.indices, -1)  # -1: no earlier block left
    chosen = selection_mask(blocks, n_blocks)  # (B, H, T, n_blocks)
    return chosen[..., key_block] & causal_mask(query_len, device=weights.device)


def head_topk_mask(weights: Tensor, top_k: int) -> Tensor:
    """Each head's own top ``top_k`` keys by its dense weight: (B, H, T, S) -> (B, H, T, S) bool."""
    scores = weights.masked_fill(weights == 0, float("-inf"))  # unread (future) keys: never
    best = scores.topk(min(top_k, weights.size(-1)), dim=-1)  # (B, H, T, top_k)
    indices = torch.where(best.values > float("-inf"), best.indices, -1)
    return selection_mask(indices, weights.size(-1))


# rules for with_choice, at most KEYS keys per query and head (the shared exact top 4 is the
# indexer model's "exact" mode)
PROBES = {
    "blocks of 2, heaviest block": lambda q, k, w: heaviest_blocks_mask(w, block_size=2, top_k=2),
    "MoBA: blocks of 1, q . k": lambda q, k, w: moba_mask(q, k, block_size=1, top_k=KEYS),
    "each head's exact top 4": lambda q, k, w: head_topk_mask(w, KEYS),
}


def with_window(rule, window: int = 2):
    """``rule`` for :func:`with_choice` plus each query's last ``window`` keys (itself included).

    A probe of NSA's sliding window: the union is read by one softmax, not by NSA's gated sum of
    separate branches.
    """

    def choose(q: Tensor, k: Tensor, weights: Tensor) -> Tensor:
        local = sliding_window_mask(q.size(-2), window, device=q.device)  # (T, S)
        return rule(q, k, weights) | local

    return choose


# blocks of 2 with a window of 2: at most 4 keys per query (the window covers the own block, or
# the own block and the previous token)
WINDOW_PROBES = {
    "window 2 + MoBA: blocks of 2, q . mean key": with_window(
        lambda q, k, w: moba_mask(q, k, block_size=2, top_k=2)
    ),
    "window 2 + blocks of 2, heaviest block": with_window(PROBES["blocks of 2, heaviest block"]),
}


def load_dense_weights(model: TinyDecoder, dense_state: dict[str, Tensor]) -> None:
    """Load a dense model's ``state_dict`` into an ``indexer`` or ``moba`` model, whole.

    The indexer model wraps each attention layer (``blocks.N.attention.inner.q_proj``, not
    ``blocks.N.attention.q_proj``), so the keys are renamed first; only the indexers, which a
    dense model lacks, may stay as they are. Anything else missing or left over is refused: a
    plain ``load_state_dict(..., strict=False)`` would drop every attention weight in silence.
    """
    renamed = {key.replace(".attention.", ".attention.inner."): v for key, v in dense_state.items()}
    result = model.load_state_dict(renamed, strict=False)
    missing = [key for key in result.missing_keys if ".indexer." not in key]
    if missing or result.unexpected_keys:
        raise ValueError(
            "dense_state: expected a dense model's weights for every non-indexer parameter; "
            f"missing {missing}, unexpected {result.unexpected_keys}"
        )


def sparse_layers(model: TinyDecoder) -> list[IndexedSparseAttention]:
    """The indexer layers of an ``indexer`` model, one per block."""
    return [block.attention.inner for block in model.blocks]


def set_mode(model: TinyDecoder, mode: str) -> None:
    """Put every indexer layer in ``mode`` ("dense", "warmup", "sparse" or "exact")."""
    for layer in sparse_layers(model):
        layer.mode = mode


def repeated_accuracy(model: nn.Module, tokens: Tensor, periods: Tensor) -> float:
    """Share of the repeated tokens (after the first period) predicted exactly."""
    with torch.no_grad():
        predicted = model(tokens)[:, :-1].argmax(-1)  # (B, 32): the guess for token p + 1
    body = torch.arange(tokens.size(1) - 1)  # (32,): position of the target in the body
    repeated = body[None] >= periods[:, None]  # (B, 32)
    correct = (predicted == tokens[:, 1:]) & repeated
    return (correct.sum() / repeated.sum()).item()


def layer_inputs(model: TinyDecoder, tokens: Tensor) -> list[Tensor]:
    """The normalised input (B, T, D) each layer's attention reads."""
    positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)  # (B, T)
    inputs, x = [], model.embed_at(tokens, positions)  # (B, T, D)
    for block in model.blocks:
        inputs.append(block.attention_norm(x))
        x = block(x)  # (B, T, D)
    return inputs


def indexer_recall(model: TinyDecoder, tokens: Tensor) -> list[float]:
    """Per layer, the mean share of the dense attention's top 4 keys the indexer picks.

    Dense weights are the layer's own causal attention, summed over heads (what the warm-up
    fits); queries 0 to 3, with fewer than 4 earlier keys (at most 4 keys, themselves
    included, which every method reads whole), are left out.
    """
    recalls = []
    with torch.no_grad():
        for layer, x in zip(sparse_layers(model), layer_inputs(model, tokens), strict=True):
            mode, layer.mode = layer.mode, "dense"
            weights = layer(x, need_weights=True)[1]  # (B, H, T, S)
            layer.mode = mode
            chosen = topk_tokens(layer.indexer(x), KEYS)  # (B, T, 4)
            recalls.append(topk_recall(chosen, dense_target(weights), KEYS).mean().item())
    return recalls


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, RETRAIN)


def load_sparse_models() -> tuple[dict[str, TinyDecoder], dict]:
    """The shipped models (eval mode), keyed ``"<kind>/seed<n>"``, and the manifest.

    Indexer models come in ``"sparse"`` mode. The file's sha256 is checked first.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), RETRAIN)
    data = _read_shipped(WEIGHTS)
    with manifest_fields(MANIFEST, RETRAIN):
        check_sha256(WEIGHTS, data, manifest["sha256"], RETRAIN)
    models = {}
    for name, state in read_state_dict(data).items():
        model = build_sparse_model(name.split("/")[0])
        model.load_state_dict({key: value.float() for key, value in state.items()})
        if name.startswith("indexer"):
            set_mode(model, "sparse")
        models[name] = model.eval()
    return models, manifest


def next_token_loss(model: nn.Module, tokens: Tensor) -> Tensor:
    """Cross-entropy of every next token of ``tokens`` (B, T)."""
    logits = model(tokens)  # (B, T, V)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])
