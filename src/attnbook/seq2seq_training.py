"""A small training loop and the accuracy measure for the encoder-decoders of chapter 1."""

from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnbook._checks import check_int
from attnbook.seq2seq import Seq2Seq, greedy_decode, shift_right
from attnbook.tasks import PAD, Batch


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
) -> list[float]:
    """Adam on ``steps`` batches from ``next_batch()``; returns the loss of every step.

    The learning rate falls linearly from ``lr`` to 0, which settles a short run; gradients
    are clipped to norm ``max_grad_norm``, as is usual for RNNs. Leaves the model in eval mode.
    """
    check_int("steps", steps, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    model.train()
    losses = []
    for _ in range(steps):
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
