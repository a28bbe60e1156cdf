"""A small training loop and the accuracy measure for the encoder-decoders of chapter 1."""

import json
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from attnbook.core._checks import check_int
from attnbook.models.seq2seq import Seq2Seq, greedy_decode, shift_right
from attnbook.models.shipped import check_sha256, read_shipped, read_state_dict
from attnbook.models.tasks import PAD, VOCAB, Batch, reversal_batch


def sequence_loss(model: Seq2Seq, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy per target token under teacher forcing; padding is not counted."""
    logits, _ = model(batch.source, batch.source_lengths, shift_right(batch.target))  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.target.flatten(), ignore_index=PAD)


def train_seq2seq(
    model: Seq2Seq,
    next_batch: Callable[[], Batch],
    steps: int,
    *,
    lr: float = 1e-2,
    max_grad_norm: float = 1.0,
    stop_after: int | None = None,
) -> list[float]:
    """Adam on ``steps`` batches from ``next_batch()``; returns the loss of every step.

    The learning rate falls linearly from ``lr`` to 0, which settles a short run; gradients
    are clipped to norm ``max_grad_norm``, as is usual for RNNs. With ``stop_after``, only the
    first ``stop_after`` steps of that same schedule run (a prefix of the full run, step for
    step). Leaves the model in eval mode.
    """
    check_int("steps", steps, 1)
    if stop_after is not None:
        check_int("stop_after", stop_after, 1, steps)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    model.train()
    losses = []
    for _ in range(steps if stop_after is None else stop_after):
        loss = sequence_loss(model, next_batch())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    return losses


def token_accuracy(model: Seq2Seq, batch: Batch) -> float:
    """The fraction of target tokens (EOS included) that greedy decoding gets right."""
    predicted, _ = greedy_decode(
        model, batch.source, batch.source_lengths, max_len=batch.target.size(1)
    )  # (B, T)
    real = batch.target != PAD  # (B, T)
    return (predicted == batch.target)[real].float().mean().item()


# Chapter 1's two trained models, shipped in data/ so that the chapter need not train them.

REVERSAL_WEIGHTS = "reversal_models.pt"
REVERSAL_MANIFEST = "reversal_models.json"
RETRAIN_REVERSAL = "python scripts/train_reversal_models.py"
REVERSAL_VARIANTS = ("plain", "attention")
REVERSAL_CONFIG = {
    "embed_dim": 16,
    "hidden_dim": 32,
    "min_len": 3,
    "max_len": 20,
    "batch_size": 64,
    "steps": 300,
    "lr": 1e-2,
    "max_grad_norm": 1.0,
    "init_seed": 0,
    "batch_seed": 0,
}


class ReversalModels(NamedTuple):
    """Chapter 1's trained models (name -> Seq2Seq, eval mode), their losses, the manifest."""

    models: dict[str, Seq2Seq]
    losses: dict[str, list[float]]
    manifest: dict


def reversal_model(attention: bool) -> Seq2Seq:
    """A fresh chapter-1 model; both variants start from the same weights for shared parts."""
    torch.manual_seed(REVERSAL_CONFIG["init_seed"])
    return Seq2Seq(
        len(VOCAB), REVERSAL_CONFIG["embed_dim"], REVERSAL_CONFIG["hidden_dim"], attention=attention
    )


def reversal_batches(seed: int | None = None) -> Callable[[], Batch]:
    """The chapter's stream of training batches; the same seed gives the same batches."""
    config = REVERSAL_CONFIG
    generator = torch.Generator().manual_seed(config["batch_seed"] if seed is None else seed)
    return lambda: reversal_batch(
        config["batch_size"], config["min_len"], config["max_len"], generator=generator
    )


def train_reversal_model(attention: bool, stop_after: int | None = None) -> tuple[Seq2Seq, list]:
    """Train one chapter-1 model as the shipped one was (all ``steps``, or the first few)."""
    model = reversal_model(attention)
    config = REVERSAL_CONFIG
    losses = train_seq2seq(
        model,
        reversal_batches(),
        config["steps"],
        lr=config["lr"],
        max_grad_norm=config["max_grad_norm"],
        stop_after=stop_after,
    )
    return model, losses


def _reversal_manifest() -> dict:
    data = read_shipped(REVERSAL_MANIFEST, RETRAIN_REVERSAL)
    try:
        manifest = json.loads(data)
        for name in REVERSAL_VARIANTS:
            manifest["losses"][name], manifest["sha256"], manifest["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"data/{REVERSAL_MANIFEST} is not a complete manifest ({type(error).__name__}: "
            f"{error}): re-run `{RETRAIN_REVERSAL}`"
        ) from error
    if manifest["config"] != REVERSAL_CONFIG:
        raise ValueError(
            f"data/{REVERSAL_MANIFEST}: its config {manifest['config']} differs from the "
            f"library's {REVERSAL_CONFIG}: re-run `{RETRAIN_REVERSAL}`"
        )
    return manifest


def load_reversal_models() -> ReversalModels:
    """Chapter 1's plain and attention models, trained by the script, on the CPU, eval mode.

    Raises ``FileNotFoundError`` when a shipped file is missing, and ``ValueError`` when the
    manifest is incomplete, its config differs from :data:`REVERSAL_CONFIG`, the weights'
    sha256 differs from the manifest's, or a state dict does not fit its model; each error
    names the script to re-run.
    """
    manifest = _reversal_manifest()
    weights = read_shipped(REVERSAL_WEIGHTS, RETRAIN_REVERSAL)
    check_sha256(REVERSAL_WEIGHTS, weights, manifest["sha256"], RETRAIN_REVERSAL)
    states = read_state_dict(weights)
    models = {}
    for name in REVERSAL_VARIANTS:
        model = reversal_model(attention=name == "attention")
        try:
            model.load_state_dict(states[name])
        except (KeyError, RuntimeError) as error:
            raise ValueError(
                f"data/{REVERSAL_WEIGHTS}: the {name} weights do not fit its model: re-run "
                f"`{RETRAIN_REVERSAL}` ({error!r})"
            ) from error
        models[name] = model.eval()
    losses = {name: list(manifest["losses"][name]) for name in REVERSAL_VARIANTS}
    return ReversalModels(models, losses, manifest)
