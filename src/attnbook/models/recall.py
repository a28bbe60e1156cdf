"""Multi-query associative recall (MQAR; Arora et al., "Zoology", 2023), at CPU size.

A sequence lists ``n_pairs`` key-value pairs, then asks for every key again in a random order,
each query followed by its answer:

    k1 v1 k2 v2 ... kP vP | q1 a1 q2 a2 ... qP aP      (T = 4P tokens)

The model must predict a_j at q_j's position: recall what was filed under that key. Keys are
tokens 0..N_KEYS - 1 (distinct within a sequence), values N_KEYS..VOCAB - 1. Softmax attention
looks the key up in its cache; a layer with a fixed d_k x d_v memory must have written every
pair into it, which works while the pairs fit (about d_k of them per head for the delta rule)
and fails beyond. ``scripts/train_recall_models.py`` trains softmax, linear, Gated DeltaNet
and 3:1 hybrid decoders on it and ships them; :func:`load_recall_models` loads and checks them.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_int
from attnbook.models.decoder import TinyDecoder
from attnbook.models.shipped import (
    check_sha256,
    manifest_fields,
    read_manifest,
    read_shipped,
    read_state_dict,
)

N_KEYS = 32
N_VALUES = 32
VOCAB = N_KEYS + N_VALUES
IGNORE = -100  # target of every position that is not a query (cross_entropy's ignore_index)
WEIGHTS = "recall_models.pt"
MANIFEST = "recall_models.json"
RETRAIN = "python scripts/train_recall_models.py"


def mqar_batch(batch_size: int, n_pairs: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Tokens (B, 4P) and targets (B, 4P): the value at each query's position, IGNORE elsewhere."""
    check_int("batch_size", batch_size)
    check_int("n_pairs", n_pairs, high=N_KEYS)
    # (B, P): distinct keys per sequence, values drawn with repeats
    keys = torch.rand(batch_size, N_KEYS, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(N_KEYS, VOCAB, (batch_size, n_pairs), generator=generator)
    order = torch.rand(batch_size, n_pairs, generator=generator).argsort(dim=1)  # (B, P)
    queries, answers = keys.gather(1, order), values.gather(1, order)  # (B, P)
    context = torch.stack([keys, values], dim=2).flatten(1)  # (B, 2P)
    asked = torch.stack([queries, answers], dim=2).flatten(1)  # (B, 2P)
    tokens = torch.cat([context, asked], dim=1)  # (B, 4P)
    targets = torch.full_like(tokens, IGNORE)  # (B, 4P)
    targets[:, 2 * n_pairs :: 2] = answers
    return tokens, targets


def build_recall_model(config: dict, layer_pattern: str) -> TinyDecoder:
    """A TinyDecoder for MQAR with ``config``'s sizes and one letter per layer (``"GGGA"``)."""
    return TinyDecoder(VOCAB, **config, layer_pattern=layer_pattern)


@torch.no_grad()
def recall_accuracy(model: TinyDecoder, tokens: Tensor, targets: Tensor) -> float:
    """The share of queries (targets != IGNORE) whose answer is the model's top prediction."""
    asked = targets != IGNORE  # (B, T)
    predicted = model(tokens).argmax(dim=-1)  # (B, T)
    return (predicted[asked] == targets[asked]).double().mean().item()


def state_floats(model: TinyDecoder) -> int:
    """Floats a linear layer keeps per sequence (H * d_head^2 per layer), summed over layers.

    Softmax layers are not counted: their cache grows with the sequence (2 * D per token).
    """
    return sum(
        block.attention.n_heads * block.attention.head_dim**2
        for kind, block in zip(model.layer_pattern, model.blocks, strict=True)
        if kind != "A"
    )


def load_recall_models() -> tuple[dict, dict[str, TinyDecoder]]:
    """The manifest and every shipped model (in eval mode), by run name; weights hash-checked."""
    manifest = read_manifest(MANIFEST, read_shipped(MANIFEST, RETRAIN), RETRAIN)
    weights = read_shipped(WEIGHTS, RETRAIN)
    with manifest_fields(MANIFEST, RETRAIN):
        check_sha256(WEIGHTS, weights, manifest["sha256"], RETRAIN)
        states = read_state_dict(weights)
        models = {}
        for name, run in manifest["runs"].items():
            model = build_recall_model(run["config"], run["layer_pattern"])
            model.load_state_dict(states[name])
            models[name] = model.eval()
    return manifest, models
