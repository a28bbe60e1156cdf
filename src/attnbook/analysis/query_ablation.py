"""Each query's own cost of removing a head, so that a head's cost can be split by kind of query.

:func:`attnbook.analysis.head_analysis.ablation_increase` gives each head's cost per window;
:func:`query_ablation_increase` removes the heads the same way (one gate at 0, the layers below
the head kept from the previous pass) and keeps every query's rise in loss. Chapter 13 splits
them between capitalised words and the rest.
"""

import torch
from torch import Tensor, nn

from attnbook.analysis.head_analysis import _check_windows, _gates, _LayerByLayer


@torch.no_grad()
def query_ablation_increase(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, T, L, H): each query's loss with one head removed (gate 0) minus it with every head.

    ``inputs`` (B, T) and ``targets`` (B, T), the next tokens, as in ``ablation_increase``; the
    mean over T is its ``per_window=True`` result, up to rounding. TinyDecoder.
    """
    _check_windows(model, inputs, targets)
    gates = _gates(model)  # (L, H)
    layers = _LayerByLayer(model, inputs, targets)
    base = layers.query_losses(gates)  # (B, T)
    increase = torch.zeros(*base.shape, *gates.shape, dtype=gates.dtype)  # (B, T, L, H)
    for layer, head in torch.cartesian_prod(*(torch.arange(n) for n in gates.shape)).tolist():
        gates[layer, head] = 0.0
        increase[:, :, layer, head] = layers.query_losses(gates) - base  # (B, T)
        gates[layer, head] = 1.0
    return increase
