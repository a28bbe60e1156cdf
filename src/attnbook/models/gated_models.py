"""Chapter 15's sink experiment: chapter 14's attention-only model, with and without a gate.

The model is chapter 14's :class:`attnbook.TinyDecoder` with ``attention_only=True`` (2 layers
of 4 heads, D = 64, learned positions, no MLP), trained on the same data,
:func:`attnbook.periodic_batch`: BOS, then a random block of period 4 to 24 repeated. Layer 0
finds the previous token, layer 1 attends to the token after the earlier occurrence of the
current one (an induction head). Where no earlier occurrence exists (the first copy) a layer-1
head has nothing useful to read, and parks its weight on BOS: an attention sink. The same
model with ``output_gate=True`` (gated attention in every layer) can switch a head's output off
instead, and the chapter measures how much weight its heads still put on BOS.

``scripts/train_gated_models.py`` trains both (seeded, one CPU thread) and writes
``data/gated_models.pt`` with its manifest ``data/gated_models.json`` (the curves of every
metric of :func:`sink_metrics`); :func:`load_gated_models` loads and checks them.
"""

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnbook.core._checks import check_tensor
from attnbook.core.heads import split_heads
from attnbook.core.masks import causal_mask
from attnbook.models.decoder import TinyDecoder
from attnbook.models.periodic import SEQUENCE_LENGTH, VOCAB_SIZE, periodic_batch
from attnbook.models.shipped import (
    check_sha256,
    manifest_fields,
    read_manifest,
    read_shipped,
    read_state_dict,
)

PERIODS = (4, 24)  # training periods, inclusive
EVAL_PERIOD = 16  # evaluation: BOS + r(16) + r(16)
CONFIG = {
    "vocab_size": VOCAB_SIZE + 1,
    "d_model": 64,
    "n_heads": 4,
    "n_layers": 2,
    "max_len": SEQUENCE_LENGTH,
    "attention_only": True,
}
VARIANTS = {"plain": False, "gated": True}  # name -> output_gate
WEIGHTS = "gated_models.pt"
MANIFEST = "gated_models.json"
RETRAIN = "python scripts/train_gated_models.py"


def build_model(output_gate: bool) -> TinyDecoder:
    """An untrained model of the experiment's ``CONFIG``, gated or not."""
    return TinyDecoder(**CONFIG, output_gate=output_gate)


def training_batch(batch_size: int, generator: torch.Generator) -> Tensor:
    """(B, 33) training sequences: BOS, then a block of period P in [4, 24] (per row) repeated.

    The period varies from row to row, so a head cannot find the earlier copy by its distance
    alone: it must match tokens (an induction head).
    """
    periods = torch.randint(PERIODS[0], PERIODS[1] + 1, (batch_size,), generator=generator)
    return periodic_batch(periods, generator)  # (B, 33)


def evaluation_batch(batch_size: int = 256, seed: int = 1234) -> Tensor:
    """(B, 33) fixed sequences BOS + r + r, r uniform random of length 16 (chapter 14's)."""
    periods = torch.full((batch_size,), EVAL_PERIOD)  # (B,)
    return periodic_batch(periods, torch.Generator().manual_seed(seed))  # (B, 33)


@torch.no_grad()
def inspect(model: TinyDecoder, tokens: Tensor) -> dict:
    """What happens inside ``model`` on ``tokens`` (B, T), read with forward hooks.

    ``weights`` (L, B, H, T, T): each layer's attention; ``attention_inputs``: the L tensors
    (B, T, D) each layer's attention reads (the residual stream after the block's LayerNorm),
    from which its queries, keys and gate are computed; ``largest_score`` (L floats): the
    largest |q . k| / sqrt(d_head) over the causal entries; ``largest_activation`` (L + 1
    floats): the largest |x| of the residual stream entering each layer and leaving the last.
    """
    streams, attention_inputs = [], []
    with ExitStack() as hooks:
        for norm in [block.attention_norm for block in model.blocks] + [model.final_norm]:
            handle = norm.register_forward_pre_hook(lambda _, args: streams.append(args[0]))
            hooks.callback(handle.remove)
        for block in model.blocks:
            handle = block.attention.register_forward_pre_hook(
                lambda _, args: attention_inputs.append(args[0])
            )
            hooks.callback(handle.remove)
        weights = model.attention_weights(tokens)  # (L, B, H, T, T)
    allowed = causal_mask(tokens.size(1), device=tokens.device)  # (T, T)
    largest_score = []
    for block, x in zip(model.blocks, attention_inputs, strict=True):
        layer = block.attention
        q = split_heads(layer.q_proj(x), layer.n_heads)  # (B, H, T, d_head)
        k = split_heads(layer.k_proj(x), layer.n_kv_heads)  # (B, H, T, d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)  # (B, H, T, T)
        largest_score.append(scores.masked_select(allowed).abs().max().item())
    return {
        "weights": weights,
        "attention_inputs": attention_inputs,
        "largest_score": largest_score,
        "largest_activation": [x.abs().max().item() for x in streams],
    }


@torch.no_grad()
def sink_metrics(model: TinyDecoder, tokens: Tensor) -> dict:
    """What the chapter measures, on ``tokens`` from :func:`evaluation_batch`.

    ``second_copy_loss``: cross-entropy of the predictable second-copy tokens (positions 18 to
    32). ``induction``: the largest over layer-1 heads of the mean weight from second-copy
    query i to key i - 15 (the token after the earlier occurrence). ``sink_first_copy`` and
    ``sink_second_copy``: layer-1 weight on BOS (key 0), averaged over heads and over the
    first-copy queries (1..16, nothing earlier to copy) or the second-copy ones (17..32).
    ``largest_score`` and ``largest_activation``: the largest over layers, as in
    :func:`inspect`.
    """
    logits = model(tokens)  # (B, T, V)
    first = EVAL_PERIOD + 1  # position of the second copy's first token
    predicted = logits[:, first : SEQUENCE_LENGTH - 1]  # (B, 15, V): predictions for 18..32
    targets = tokens[:, first + 1 :]  # (B, 15)
    loss = nn.functional.cross_entropy(predicted.flatten(0, 1), targets.flatten())
    seen = inspect(model, tokens)
    last = seen["weights"][-1]  # (B, H, T, T)
    queries = torch.arange(first, SEQUENCE_LENGTH)  # (16,)
    induction = last[:, :, queries, queries - EVAL_PERIOD + 1].mean(dim=(0, 2))  # (H,)
    to_bos = last[..., 0]  # (B, H, T)
    return {
        "second_copy_loss": loss.item(),
        "induction": induction.max().item(),
        "sink_first_copy": to_bos[:, :, 1:first].mean().item(),
        "sink_second_copy": to_bos[:, :, first:].mean().item(),
        "largest_score": max(seen["largest_score"]),
        "largest_activation": max(seen["largest_activation"]),
    }


@dataclass
class GatedModels:
    """The two trained models (eval mode) and the manifest they were checked against."""

    plain: TinyDecoder
    gated: TinyDecoder
    manifest: dict


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, RETRAIN)


def load_gated_models() -> GatedModels:
    """The shipped plain and gated models, checked against ``data/gated_models.json``.

    Raises ``FileNotFoundError`` when a file is missing and ``ValueError`` when the weights'
    sha256 or shapes differ from the manifest's; both name the script to re-run.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), RETRAIN)
    weights = _read_shipped(WEIGHTS)
    with manifest_fields(MANIFEST, RETRAIN):
        check_sha256(WEIGHTS, weights, manifest["sha256"], RETRAIN)
        config = manifest["config"]
    if config != CONFIG:
        raise ValueError(
            f"data/{MANIFEST}: config {config} differs from the library's {CONFIG}: "
            f"re-run `{RETRAIN}`"
        )
    states = read_state_dict(weights)
    models = {}
    for name, gate in VARIANTS.items():
        model = build_model(gate)
        try:
            model.load_state_dict(states[name])
        except (RuntimeError, KeyError) as error:
            raise ValueError(
                f"data/{WEIGHTS}: no fit for {name}: re-run `{RETRAIN}` ({error})"
            ) from error
        models[name] = model.eval()
    return GatedModels(models["plain"], models["gated"], manifest)


@contextmanager
def fixed_gate(layer: nn.Module, value: Tensor) -> Iterator[None]:
    """Within the ``with`` block, ``layer``'s output gate is ``value`` at every position.

    ``layer`` is a :class:`attnbook.GroupedQueryAttention` with ``output_gate=True``, whose gate
    is sigmoid(gate_proj(x)); ``value`` (H * d_head,) holds one gate in [0, 1] per feature,
    e.g. the gate's mean over a batch. A forward hook replaces gate_proj's output by
    logit(value), so the gate no longer depends on the input: the ablation that asks what the
    gate's input dependence does. The hook is removed on leaving the block.
    """
    gate_proj = getattr(layer, "gate_proj", None)
    if not isinstance(gate_proj, nn.Linear):
        raise ValueError(
            f"layer: expected an attention layer with an output gate (output_gate=True), "
            f"got {type(layer).__name__} without one"
        )
    check_tensor("value", value, "(H * d_head,)", rank=1)
    width = gate_proj.out_features
    if value.size(0) != width:
        raise ValueError(f"value: expected one gate per feature, {width}, got {value.size(0)}")
    if not ((value >= 0) & (value <= 1)).all():
        raise ValueError("value: expected gates in [0, 1], got values outside it")
    # sigmoid(logit(v)) = v; v = 1 gives logit +inf and sigmoid 1 exactly
    logit = torch.logit(value.double()).to(gate_proj.weight.dtype)  # (H * d_head,)
    handle = gate_proj.register_forward_hook(lambda _module, _args, out: logit.expand_as(out))
    try:
        yield
    finally:
        handle.remove()
