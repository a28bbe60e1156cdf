"""Periodic random sequences: the data of chapter 14's circuits and chapter 15's sink experiment.

A sequence is a first token (BOS, or one more random token), then a random block of ``period``
tokens repeated up to 32 tokens. Nothing in the first block can be predicted; every later token
can, by finding its earlier occurrence and copying what followed it (an induction head).
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_tensor

VOCAB_SIZE = 64  # random tokens 0 .. 63
BOS = VOCAB_SIZE  # token 64 starts every sequence of the BOS runs
SEQUENCE_LENGTH = 33  # BOS (or a random first token) + 32 tokens


def periodic_batch(periods: Tensor, generator: torch.Generator, *, bos: bool = True) -> Tensor:
    """Token ids (B, 33): a first token, then a random block of ``periods[b]`` tokens repeated.

    ``periods`` (B,) holds one integer period per sequence, each in [1, 32]. The first token is
    BOS (id 64) when ``bos``, otherwise one more random token. Block tokens are uniform in
    0 .. 63, drawn from ``generator``.
    """
    check_tensor("periods", periods, "(B,)", rank=1)
    if periods.dtype.is_floating_point or periods.dtype.is_complex or periods.dtype == torch.bool:
        raise ValueError(f"periods: expected an integer tensor, got dtype {periods.dtype}")
    if periods.numel() and (periods.min() < 1 or periods.max() > SEQUENCE_LENGTH - 1):
        raise ValueError(
            f"periods: expected values in [1, {SEQUENCE_LENGTH - 1}], got values from "
            f"{periods.min().item()} to {periods.max().item()}"
        )
    batch, length = len(periods), SEQUENCE_LENGTH - 1
    blocks = torch.randint(0, VOCAB_SIZE, (batch, length), generator=generator)  # (B, 32)
    # (B, 32): index into the block
    repeat = torch.arange(length)[None] % periods[:, None].long().cpu()
    body = blocks.gather(1, repeat)  # (B, 32)
    if bos:
        first = torch.full((batch, 1), BOS)  # (B, 1)
    else:
        first = torch.randint(0, VOCAB_SIZE, (batch, 1), generator=generator)  # (B, 1)
    return torch.cat([first, body], dim=1)  # (B, 33)
