"""Multi-query associative recall (MQAR; Arora et al., "Zoology", 2023), at CPU size.

A sequence lists ``n_pairs`` key-value pairs, then asks for every key again in a random order,
each query followed by its answer:

    k1 v1 k2 v2 ... kP vP | q1 a1 q2 a2 ... qP aP      (T = 4P tokens)

The model must predict a_j at q_j's position: recall what was filed under that key. Keys are
tokens 0..N_KEYS - 1 (distinct within a sequence), values N_KEYS..VOCAB - 1. Softmax attention
looks the key up in its cache; a layer with a fixed d_k x d_v memory must have written every
pair into it, which works while the pairs fit (every one up to about d_k / 2 random unit keys
per head for the delta rule, chapter 18) and fails beyond. ``scripts/train_recall_models.py``
trains softmax, linear, Gated DeltaNet and 3:1 hybrid decoders on it and ships them in data/;
:func:`load_recall_models` loads and checks them.
"""

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attnbook.core._checks import check_int
from attnbook.core.device import get_device
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
CHUNK_SIZE = 16
EVAL_PAIRS = (2, 4, 8)
EVAL_SIZE, EVAL_SEED = 128, 1234
# Gated DeltaNet's dt_bias at initialisation: alpha = exp(-softplus(-4.6)) = 0.99 per token, a
# memory that lasts about 100 tokens. The layer's default (0) gives alpha = 0.5, which forgets
# a pair within a few tokens; in probes such models stayed near chance (the script's docstring).
DT_BIAS_INIT = -4.6


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


class ShortConvAttention(nn.Module):
    """Softmax attention on a short causal convolution of its input: ``attention(conv(x))``.

    The depthwise convolution mixes each of the D channels with its ``conv_kernel - 1``
    predecessors, as :class:`attnbook.GatedDeltaNet`'s does on q, k and v, so that a value's
    token can see the key just before it: every recall model then starts from the same
    previous-token step, and what differs between them is the memory alone. Called like the
    wrapped ``attention``; whole sequences only (``cache`` must be None).
    """

    def __init__(self, attention: nn.Module, conv_kernel: int = 4) -> None:
        super().__init__()
        check_int("conv_kernel", conv_kernel)
        self.attention = attention
        self.d_model, self.n_heads = attention.d_model, attention.n_heads
        self.head_dim, self.conv_kernel = attention.head_dim, conv_kernel
        # depthwise: each of the D channels mixes only its own last conv_kernel values
        self.conv = nn.Conv1d(self.d_model, self.d_model, conv_kernel, groups=self.d_model)

    def new_cache(self):
        raise ValueError("cache: the recall models run whole sequences only")

    def forward(self, x: Tensor, *, cache=None, **options) -> tuple[Tensor, Tensor | None]:
        if cache is not None:
            self.new_cache()
        padded = F.pad(x.transpose(1, 2), (self.conv_kernel - 1, 0))  # (B, D, K - 1 + T)
        convolved = self.conv(padded).transpose(1, 2)  # (B, T, D)
        return self.attention(convolved, **options)


def build_recall_model(config: dict, layer_pattern: str) -> TinyDecoder:
    """A TinyDecoder for MQAR with ``config``'s sizes and one letter per layer (``"GGGA"``).

    Its softmax layers get a :class:`ShortConvAttention` convolution like the linear layers'
    own; its Gated DeltaNet layers start with alpha near 0.99 (``DT_BIAS_INIT``). The linear
    layers run their chunked form in chunks of ``CHUNK_SIZE`` tokens: the sequences are short,
    and every chunk size gives the same numbers (chapter 18), only faster.
    """
    model = TinyDecoder(VOCAB, **config, layer_pattern=layer_pattern)
    for kind, block in zip(model.layer_pattern, model.blocks, strict=True):
        if kind == "A":
            block.attention = ShortConvAttention(block.attention)
        else:
            block.attention.chunk_size = CHUNK_SIZE
        if kind == "G":
            with torch.no_grad():
                block.attention.dt_bias.fill_(DT_BIAS_INIT)
    return model


@torch.no_grad()
def recall_accuracy(model: TinyDecoder, tokens: Tensor, targets: Tensor) -> float:
    """The share of queries (targets != IGNORE) whose answer is the model's top prediction."""
    asked = targets != IGNORE  # (B, T)
    predicted = model(tokens).argmax(dim=-1)  # (B, T)
    return (predicted[asked] == targets[asked]).double().mean().item()


def accuracy_by_pairs(
    model: TinyDecoder,
    pairs: tuple[int, ...] = EVAL_PAIRS,
    size: int = EVAL_SIZE,
    seed: int = EVAL_SEED,
) -> dict[str, float]:
    """Recall accuracy on ``size`` fixed sequences for each number of pairs (keys as strings).

    The sequences depend only on ``seed``: every model is measured on the same ones.
    """
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    accuracy = {}
    for n_pairs in pairs:
        tokens, targets = mqar_batch(size, n_pairs, generator)
        accuracy[str(n_pairs)] = recall_accuracy(model, tokens, targets)
    model.train(was_training)
    return accuracy


@torch.no_grad()
def last_softmax_weights(model: TinyDecoder, tokens: Tensor) -> Tensor:
    """The attention weights (B, H, T, T) of ``model``'s last softmax layer on ``tokens`` (B, T).

    The model runs as usual; a hook keeps what reaches that layer (the normalised residual
    stream), and the layer is called again on it with ``need_weights=True``. Refuses a model
    with no softmax ("A") layer.
    """
    if "A" not in model.layer_pattern:
        raise ValueError(
            f"model: expected a softmax ('A') layer in its layer_pattern, got "
            f"{model.layer_pattern!r}"
        )
    layer = model.blocks[model.layer_pattern.rindex("A")].attention
    kept = []
    hook = layer.register_forward_pre_hook(lambda module, args: kept.append(args[0]))
    try:
        model(tokens)
    finally:
        hook.remove()
    _, weights = layer(kept[0], is_causal=True, need_weights=True)
    return weights  # (B, H, T, T)


@torch.no_grad()
def decay_gates(model: TinyDecoder, tokens: Tensor) -> dict[int, Tensor]:
    """Each Gated DeltaNet layer's decay alpha (B, H, T) on ``tokens`` (B, T), by block index.

    The model runs as usual; a hook keeps what reaches each Gated DeltaNet ("G") layer, and the
    layer's ``gates`` computes alpha from it. Refuses a model with no such layer.
    """
    if "G" not in model.layer_pattern:
        raise ValueError(
            f"model: expected a Gated DeltaNet ('G') layer in its layer_pattern, got "
            f"{model.layer_pattern!r}"
        )
    kept = {}
    hooks = [
        block.attention.register_forward_pre_hook(
            lambda module, args, index=index: kept.__setitem__(index, args[0])
        )
        for index, (kind, block) in enumerate(zip(model.layer_pattern, model.blocks, strict=True))
        if kind == "G"
    ]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    return {index: model.blocks[index].attention.gates(x)[0] for index, x in kept.items()}


def state_floats(model: TinyDecoder) -> int:
    """Floats a linear layer keeps per sequence (H * d_head^2 per layer), summed over layers.

    Softmax layers are not counted: their cache grows with the sequence (2 * D per token).
    """
    return sum(
        block.attention.n_heads * block.attention.head_dim**2
        for kind, block in zip(model.layer_pattern, model.blocks, strict=True)
        if kind != "A"
    )


def held_floats(model: TinyDecoder, n_tokens: int) -> dict[str, int]:
    """Floats the model keeps per sequence after ``n_tokens`` tokens, by kind, over all layers.

    ``"memory"``: each linear layer's H d_head x d_head state; ``"normaliser"``: linear
    attention's z (H d_head), absent from Gated DeltaNet; ``"convolution"``: the last
    ``conv_kernel - 1`` inputs of every layer's short convolution (3D channels in a linear
    layer, D before a softmax layer); ``"kv_cache"``: K and V, D each, of every token in each
    softmax layer. Only the cache grows with ``n_tokens``.
    """
    check_int("n_tokens", n_tokens, low=0)
    held = dict.fromkeys(("memory", "normaliser", "convolution", "kv_cache"), 0)
    for kind, block in zip(model.layer_pattern, model.blocks, strict=True):
        layer = block.attention
        if kind == "A":
            held["convolution"] += (layer.conv_kernel - 1) * layer.d_model
            held["kv_cache"] += 2 * layer.d_model * n_tokens
            continue
        held["memory"] += layer.n_heads * layer.head_dim**2
        held["convolution"] += (layer.conv_kernel - 1) * layer.conv.in_channels
        if kind == "L":
            held["normaliser"] += layer.n_heads * layer.head_dim
    return held


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, RETRAIN)


def load_recall_models(
    device: torch.device | str | None = None,
) -> tuple[dict, dict[str, TinyDecoder]]:
    """The manifest and every shipped model (float32, eval mode) by run name, on ``device``.

    Run names are ``"<architecture>/h<heads>/seed<n>"``. Raises ``FileNotFoundError`` when a
    shipped file is missing and ``ValueError`` when the weights' sha256 differs from the
    manifest's, when the manifest is truncated or incomplete, or when a state dict does not fit
    its model; each error names the file and the script to re-run.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), RETRAIN)
    weights = _read_shipped(WEIGHTS)
    with manifest_fields(MANIFEST, RETRAIN):
        check_sha256(WEIGHTS, weights, manifest["sha256"], RETRAIN)
        builds = {
            name: (
                {**manifest["config"], "n_heads": run["n_heads"], "n_layers": len(pattern)},
                pattern,
            )
            for name, run in manifest["runs"].items()
            for pattern in (run["layer_pattern"],)
        }
    states = read_state_dict(weights)
    device = get_device() if device is None else torch.device(device)
    models = {}
    for name, (config, layer_pattern) in builds.items():
        model = build_recall_model(config, layer_pattern)
        try:
            model.load_state_dict({key: value.float() for key, value in states[name].items()})
        except (KeyError, RuntimeError) as error:
            raise ValueError(
                f"data/{WEIGHTS}: the {name} weights do not fit its model: re-run `{RETRAIN}` "
                f"({error!r})"
            ) from error
        models[name] = model.to(device).eval()
    return manifest, models
