"""Mean ablation of single heads in a TinyDecoder: each head's output replaced by its average.

Zero ablation (:func:`attnbook.analysis.head_analysis.ablation_increase`) sets a head's gate
to 0, so the layers above read a residual stream without that head's usual contribution, a
stream they never saw in training. Mean ablation keeps the stream's usual size: the head's
output, its ``d_head`` columns of the merged heads that the output projection reads, is
replaced by its mean over every window and position of the inputs. What is lost is only what
the head says about *this* window at *this* position.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnbook.analysis.head_analysis import _check_windows
from attnbook.core._checks import check_int


def _check_heads(heads: object, n_layers: int, n_heads: int) -> None:
    """``heads``: a list of (layer, head) pairs of ints inside an (L, H) table of heads."""
    if isinstance(heads, str | bytes) or not isinstance(heads, list | tuple):
        raise ValueError(
            f"heads: expected a list of (layer, head) pairs, got {type(heads).__name__}"
        )
    for index, pair in enumerate(heads):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"heads[{index}]: expected a (layer, head) pair, got {pair!r}")
        check_int(f"heads[{index}] layer", pair[0], low=0, high=n_layers - 1)
        check_int(f"heads[{index}] head", pair[1], low=0, high=n_heads - 1)


def _merged_heads(block: nn.Module, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The block's output (B, T, D) and the merged heads its output projection read (B, T, D)."""
    seen = []
    hook = block.attention.out_proj.register_forward_pre_hook(
        lambda _module, args: seen.append(args[0])
    )
    try:
        output = block(x, None, mask=mask)  # (B, T, D)
    finally:
        hook.remove()
    return output, seen[0]  # (B, T, D), (B, T, H * d_head)


def _block_with_write(
    block: nn.Module, x: Tensor, gates: Tensor, write: Tensor, mask: Tensor | None
) -> Tensor:
    """The block on x (B, T, D) with head gates (H,) and ``write`` (D,) added to its attention."""
    hook = block.attention.out_proj.register_forward_hook(
        lambda _module, _args, output: output + write
    )
    try:
        return block(x, None, mask=mask, head_mask=gates)  # (B, T, D)
    finally:
        hook.remove()


def _layer_inputs_and_means(
    model: nn.Module, inputs: Tensor
) -> tuple[Tensor, Tensor | None, list[Tensor], list[Tensor]]:
    """The last block's output, the mask, each block's input and each layer's merged-head mean."""
    x = model._embed(inputs, 0)  # (B, T, D)
    mask = model._attention_mask(inputs.size(1), 0, x.dtype, x.device)  # (H, T, T) or None
    layer_inputs, means = [], []
    for block in model.blocks:
        layer_inputs.append(x)
        x, merged = _merged_heads(block, x, mask)  # (B, T, D), (B, T, H * d_head)
        means.append(merged.mean(dim=(0, 1)))  # (H * d_head,)
    return x, mask, layer_inputs, means


def _mean_write(block: nn.Module, mean: Tensor, head: int, n_heads: int) -> Tensor:
    """(D,): what head ``head`` writes through the output projection when its output is ``mean``."""
    d_head = mean.numel() // n_heads
    out = block.attention.out_proj.weight  # (D, H * d_head)
    columns = slice(head * d_head, (head + 1) * d_head)
    return out[:, columns] @ mean[columns]  # (D,)


@torch.no_grad()
def mean_ablation_increase(
    model: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    heads: list[tuple[int, int]] | None = None,
) -> Tensor:
    """(L, H): the loss with one head's output replaced by its mean, minus the loss with all.

    The mean of head h of layer l is taken over the B windows and T positions of ``inputs``
    (B, T), with every head in place; ``targets`` (B, T) are the next tokens. Only the layers
    from l up are recomputed for each head. ``heads``: the (layer, head) pairs to measure
    (default: every head); the others are NaN. TinyDecoder with plain multi-head attention.
    """
    _check_windows(model, inputs, targets)
    n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
    if heads is None:
        heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    _check_heads(heads, n_layers, n_heads)
    x, mask, layer_inputs, means = _layer_inputs_and_means(model, inputs)
    flat_targets = targets.flatten().long()  # (B * T,)

    def loss(x: Tensor) -> float:
        logits = model.lm_head(model.final_norm(x))  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), flat_targets).item()

    base = loss(x)
    increase = torch.full((n_layers, n_heads), torch.nan, dtype=x.dtype)  # (L, H)
    for layer, head in heads:
        block = model.blocks[layer]
        write = _mean_write(block, means[layer], head, n_heads)  # (D,)
        gates = torch.ones(n_heads, dtype=x.dtype, device=x.device)  # (H,)
        gates[head] = 0.0
        y = _block_with_write(block, layer_inputs[layer], gates, write, mask)  # (B, T, D)
        for above in model.blocks[layer + 1 :]:
            y = above(y, None, mask=mask)  # (B, T, D)
        increase[layer, head] = loss(y) - base
    return increase


@torch.no_grad()
def mean_ablated_losses(
    model: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    head_sets: list[list[tuple[int, int]]],
) -> Tensor:
    """(S, B, T): every query's next-token loss with all the heads of one set mean-ablated.

    For each of the S sets in ``head_sets``, every (layer, head) of the set has its output
    replaced by its mean at once; the means are taken over the B windows and T positions of
    ``inputs`` (B, T) with every head in place, as in :func:`mean_ablation_increase`.
    ``targets`` (B, T) are the next tokens. An empty set gives the model's own losses. The
    layers below a set's lowest head are computed once for all sets.
    """
    _check_windows(model, inputs, targets)
    n_layers, n_heads = len(model.blocks), model.blocks[0].attention.n_heads
    if isinstance(head_sets, str | bytes) or not isinstance(head_sets, list | tuple):
        raise ValueError(
            f"head_sets: expected a list of lists of (layer, head) pairs, "
            f"got {type(head_sets).__name__}"
        )
    for index, heads in enumerate(head_sets):
        _check_heads(heads, n_layers, n_heads)
        pairs = [tuple(pair) for pair in heads]
        if len(set(pairs)) != len(pairs):
            raise ValueError(
                f"head_sets[{index}]: expected distinct (layer, head) pairs, got {heads!r}"
            )
    x, mask, layer_inputs, means = _layer_inputs_and_means(model, inputs)
    losses = []
    for heads in head_sets:
        gates = torch.ones(n_layers, n_heads, dtype=x.dtype, device=x.device)  # (L, H)
        writes = torch.zeros(n_layers, x.size(-1), dtype=x.dtype, device=x.device)  # (L, D)
        for layer, head in heads:
            gates[layer, head] = 0.0
            writes[layer] += _mean_write(model.blocks[layer], means[layer], head, n_heads)
        start = min((layer for layer, _ in heads), default=n_layers)
        y = layer_inputs[start] if start < n_layers else x  # (B, T, D)
        for layer in range(start, n_layers):
            block = model.blocks[layer]
            y = _block_with_write(block, y, gates[layer], writes[layer], mask)  # (B, T, D)
        logits = model.lm_head(model.final_norm(y))  # (B, T, V)
        losses.append(
            F.cross_entropy(logits.transpose(1, 2), targets.long(), reduction="none")
        )  # (B, T)
    return torch.stack(losses)  # (S, B, T)
