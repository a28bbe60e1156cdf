"""Training a language model on token ids: next-token loss, validation loss, a training loop.

The model is anything mapping token ids (B, T) to logits (B, T, V), such as
:class:`attnbook.TinyDecoder`. :func:`train_language_model` draws random windows from the
training ids with a seeded generator, takes AdamW steps, and records the validation loss on
fixed windows every ``eval_every`` steps, so a run is reproducible under its seed.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnbook.core._checks import check_int
from attnbook.models.text import random_batch, sequential_batches


def next_token_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy (nats per token) of the model's logits for inputs (B, T) vs targets."""
    logits = model(inputs)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # scalar


@torch.no_grad()
def evaluate_loss(model: nn.Module, ids: Tensor, block_size: int, *, max_blocks: int = 64) -> float:
    """Mean next-token loss over the first ``max_blocks`` consecutive windows of ``ids``."""
    was_training = model.training
    model.eval()
    inputs, targets = sequential_batches(ids, block_size, max_blocks)  # (N_b, T) each
    loss = next_token_loss(model, inputs, targets).item()
    model.train(was_training)
    return loss


@dataclass
class TrainingHistory:
    """Validation losses at the steps they were measured (step 0 is before training)."""

    steps: list[int] = field(default_factory=list)
    validation_losses: list[float] = field(default_factory=list)
    final_training_loss: float = float("nan")

    @classmethod
    def from_record(cls, record: dict) -> "TrainingHistory":
        """The history a manifest records as ``dataclasses.asdict`` wrote it (other keys, such
        as a run's time, are ignored)."""
        return cls(record["steps"], record["validation_losses"], record["final_training_loss"])


def train_language_model(
    model: nn.Module,
    train_ids: Tensor,
    validation_ids: Tensor,
    *,
    steps: int,
    batch_size: int,
    block_size: int,
    lr: float = 3e-3,
    eval_every: int = 50,
    eval_blocks: int = 64,
    seed: int = 0,
) -> TrainingHistory:
    """Train with AdamW on random windows of ``train_ids``; return the validation history.

    The windows come from ``torch.Generator().manual_seed(seed)``, so two runs from the same
    initial weights take the same steps. The model is left in eval mode.
    """
    for name, value in (("steps", steps), ("eval_every", eval_every)):
        check_int(name, value)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    history = TrainingHistory()
    history.steps.append(0)
    history.validation_losses.append(
        evaluate_loss(model, validation_ids, block_size, max_blocks=eval_blocks)
    )
    model.train()
    for step in range(1, steps + 1):
        inputs, targets = random_batch(train_ids, batch_size, block_size, generator)  # (B, T)
        loss = next_token_loss(model, inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            history.steps.append(step)
            history.validation_losses.append(
                evaluate_loss(model, validation_ids, block_size, max_blocks=eval_blocks)
            )
    history.final_training_loss = loss.item()
    model.eval()
    return history
