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
    x = model._embed(inputs, 0)  # (B, T, D)
    mask = model._attention_mask(inputs.size(1), 0, x.dtype, x.device)  # (H, T, T) or None
    layer_inputs, means = [], []
    for block in model.blocks:
        layer_inputs.append(x)
        x, merged = _merged_heads(block, x, mask)  # (B, T, D), (B, T, H * d_head)
        means.append(merged.mean(dim=(0, 1)))  # (H * d_head,)
    flat_targets = targets.flatten().long()  # (B * T,)

    def loss(x: Tensor) -> float:
        logits = model.lm_head(model.final_norm(x))  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), flat_targets).item()

    base = loss(x)
    increase = torch.full((n_layers, n_heads), torch.nan, dtype=x.dtype)  # (L, H)
    for layer, head in heads:
        block = model.blocks[layer]
        d_head = means[layer].numel() // n_heads
        out = block.attention.out_proj.weight  # (D, H * d_head)
        columns = slice(head * d_head, (head + 1) * d_head)
        write = out[:, columns] @ means[layer][columns]  # (D,): the head's mean output
        gates = torch.ones(n_heads, dtype=x.dtype, device=x.device)  # (H,)
        gates[head] = 0.0
        y = _block_with_write(block, layer_inputs[layer], gates, write, mask)  # (B, T, D)
        for above in model.blocks[layer + 1 :]:
            y = above(y, None, mask=mask)  # (B, T, D)
        increase[layer, head] = loss(y) - base
    return increase
