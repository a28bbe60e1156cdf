"""Chapter 15's sink experiment: two attention-only models, with and without an output gate.

A 2-layer attention-only transformer (no MLP, no LayerNorm, learned positions) learns to copy
on sequences of random tokens repeated with a random period after a BOS token: layer 0 finds
the previous token, layer 1 attends to the token after the earlier occurrence of the current
one (an induction head). Where no earlier occurrence exists (the first copy) a layer-1 head
has nothing useful to read, and parks its weight on BOS: an attention sink. The same model
with gated attention (``GroupedQueryAttention(..., output_gate=True)``) can switch a head's
output off instead, and the chapter measures how much weight its heads still put on BOS.

``scripts/train_gated_models.py`` trains both (seeded, one CPU thread) and writes
``data/gated_models.pt`` with its manifest ``data/gated_models.json`` (the curves of every
metric of :func:`sink_metrics`); :func:`load_gated_models` loads and checks them.
"""

import json
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnbook.core._checks import check_int, check_tensor
from attnbook.core.heads import split_heads
from attnbook.core.masks import causal_mask
from attnbook.layers.multihead import GroupedQueryAttention
from attnbook.models.shipped import check_sha256, read_shipped, read_state_dict

N_SYMBOLS = 64  # random tokens 0..63
BOS = N_SYMBOLS  # token 64 starts every sequence
SEQUENCE_LEN = 33  # BOS + 32 tokens
PERIODS = (4, 24)  # training periods, inclusive
EVAL_HALF = 16  # evaluation: BOS + r(16) + r(16)
CONFIG = {"vocab_size": N_SYMBOLS + 1, "d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 33}
VARIANTS = {"plain": False, "gated": True}  # name -> output_gate
WEIGHTS = "gated_models.pt"
MANIFEST = "gated_models.json"
RETRAIN = "python scripts/train_gated_models.py"


class AttentionOnlyModel(nn.Module):
    """Token and learned position embeddings, ``n_layers`` of x + attention(x), an unembedding.

    No MLP and no LayerNorm, so everything the model does is attention. Every layer is a
    causal :class:`attnbook.GroupedQueryAttention` with ``n_heads`` heads, gated when
    ``output_gate`` is True. ``forward(tokens (B, T))`` -> logits (B, T, V).
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int,
        n_heads: int,
        n_layers: int,
        max_len: int,
        output_gate: bool = False,
    ) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size)
        check_int("n_layers", n_layers)
        check_int("max_len", max_len)
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(
            GroupedQueryAttention(d_model, n_heads, n_heads, output_gate=output_gate)
            for _ in range(n_layers)
        )
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)

    def embed(self, tokens: Tensor) -> Tensor:
        check_tensor("tokens", tokens, "(B, T)", rank=2)
        if tokens.size(1) > self.max_len:
            raise ValueError(
                f"tokens: at most max_len = {self.max_len} positions, got {tokens.size(1)}"
            )
        positions = torch.arange(tokens.size(1), device=tokens.device)  # (T,)
        return self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, D)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, T, D)
        for layer in self.layers:
            x = x + layer(x, is_causal=True)[0]  # (B, T, D)
        return self.unembed(x)  # (B, T, V)

    @torch.no_grad()
    def inspect(self, tokens: Tensor) -> dict:
        """Each layer's weights (L, B, H, T, T), largest |score| (L,) and largest |x| (L + 1,).

        The scores are q . k / sqrt(d_head) before the softmax, over the causal entries; x is
        the residual stream entering each layer and leaving the last.
        """
        x = self.embed(tokens)  # (B, T, D)
        allowed = causal_mask(tokens.size(1), device=tokens.device)  # (T, T)
        weights, largest_score, largest_activation = [], [], [x.abs().max().item()]
        for layer in self.layers:
            q = split_heads(layer.q_proj(x), layer.n_heads)  # (B, H, T, d_head)
            k = split_heads(layer.k_proj(x), layer.n_kv_heads)  # (B, H, T, d_head)
            scores = q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)  # (B, H, T, T)
            largest_score.append(scores.masked_select(allowed).abs().max().item())
            attended, layer_weights = layer(x, is_causal=True, need_weights=True)
            weights.append(layer_weights)
            x = x + attended  # (B, T, D)
            largest_activation.append(x.abs().max().item())
        return {
            "weights": torch.stack(weights),  # (L, B, H, T, T)
            "largest_score": largest_score,
            "largest_activation": largest_activation,
        }


def build_model(output_gate: bool) -> AttentionOnlyModel:
    """An untrained model of the experiment's ``CONFIG``, gated or not."""
    return AttentionOnlyModel(**CONFIG, output_gate=output_gate)


def periodic_batch(batch_size: int, generator: torch.Generator) -> Tensor:
    """(B, 33) training sequences: BOS, then a random block of period P in [4, 24] repeated.

    The period varies from row to row, so a head cannot find the earlier copy by its distance
    alone: it must match tokens (an induction head).
    """
    check_int("batch_size", batch_size)
    rows = []
    for _ in range(batch_size):
        period = int(torch.randint(PERIODS[0], PERIODS[1] + 1, (1,), generator=generator))
        block = torch.randint(0, N_SYMBOLS, (period,), generator=generator)  # (P,)
        repeats = math.ceil((SEQUENCE_LEN - 1) / period)
        rows.append(block.repeat(repeats)[: SEQUENCE_LEN - 1])  # (32,)
    body = torch.stack(rows)  # (B, 32)
    return torch.cat([torch.full((batch_size, 1), BOS), body], dim=1)  # (B, 33)


def evaluation_batch(batch_size: int = 256, seed: int = 1234) -> Tensor:
    """(B, 33) fixed sequences BOS + r + r, r uniform random of length 16."""
    generator = torch.Generator().manual_seed(seed)
    half = torch.randint(0, N_SYMBOLS, (batch_size, EVAL_HALF), generator=generator)  # (B, 16)
    return torch.cat([torch.full((batch_size, 1), BOS), half, half], dim=1)  # (B, 33)


@torch.no_grad()
def sink_metrics(model: AttentionOnlyModel, tokens: Tensor) -> dict:
    """What the chapter measures, on ``tokens`` from :func:`evaluation_batch`.

    ``second_copy_loss``: cross-entropy of the predictable second-copy tokens (positions 18 to
    32). ``induction``: the largest over layer-1 heads of the mean weight from second-copy
    query i to key i - 15 (the token after the earlier occurrence). ``sink_first_copy`` and
    ``sink_second_copy``: layer-1 weight on BOS (key 0), averaged over heads and over the
    first-copy queries (1..16, nothing earlier to copy) or the second-copy ones (17..32).
    ``largest_score`` and ``largest_activation``: as in :meth:`AttentionOnlyModel.inspect`.
    """
    logits = model(tokens)  # (B, T, V)
    first = EVAL_HALF + 1  # position of the second copy's first token
    predicted = logits[:, first : SEQUENCE_LEN - 1]  # (B, 15, V): predictions for 18..32
    targets = tokens[:, first + 1 :]  # (B, 15)
    loss = nn.functional.cross_entropy(predicted.flatten(0, 1), targets.flatten())
    seen = model.inspect(tokens)
    last = seen["weights"][-1]  # (B, H, T, T)
    queries = torch.arange(first, SEQUENCE_LEN)  # (16,)
    induction = last[:, :, queries, queries - EVAL_HALF + 1].mean(dim=(0, 2))  # (H,)
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

    plain: AttentionOnlyModel
    gated: AttentionOnlyModel
    manifest: dict


def load_gated_models() -> GatedModels:
    """The shipped plain and gated models, checked against ``data/gated_models.json``.

    Raises ``FileNotFoundError`` when a file is missing and ``ValueError`` when the weights'
    sha256 or shapes differ from the manifest's; both name the script to re-run.
    """
    manifest = json.loads(read_shipped(MANIFEST, RETRAIN))
    weights = read_shipped(WEIGHTS, RETRAIN)
    check_sha256(WEIGHTS, weights, manifest["sha256"], RETRAIN)
    if manifest["config"] != CONFIG:
        raise ValueError(
            f"data/{MANIFEST}: config {manifest['config']} differs from the library's {CONFIG}: "
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
