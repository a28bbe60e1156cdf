"""Splitting a model-width tensor into heads, merging heads back, and sharing key/value heads."""

from torch import Tensor

from attnbook.core._checks import check_int, check_tensor, shape_of


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, n_heads * d_head) -> (B, n_heads, T, d_head).

    View then transpose: the view cuts each token's features into heads, the transpose moves
    the head axis in front of the tokens. Viewing straight to (B, n_heads, T, d_head) would
    instead cut the *token* axis into blocks and mix different tokens into one head.
    """
    check_tensor("x", x, "(B, T, H * d_head)", rank=3)
    check_int("n_heads", n_heads)
    batch, length, width = x.shape
    if width % n_heads:
        raise ValueError(
            f"n_heads: the width {width} of x.shape = {shape_of(x)} is not divisible by "
            f"n_heads = {n_heads}; each head needs d_head = width / n_heads features"
        )
    x = x.view(batch, length, n_heads, width // n_heads)  # (B, T, H, d_head)
    return x.transpose(1, 2)  # (B, H, T, d_head)


def merge_heads(x: Tensor) -> Tensor:
    """(B, n_heads, T, d_head) -> (B, T, n_heads * d_head), the inverse of :func:`split_heads`."""
    check_tensor("x", x, "(B, H, T, d_head)", rank=4)
    batch, n_heads, length, head_dim = x.shape
    x = x.transpose(1, 2).contiguous()  # (B, T, H, d_head)
    return x.view(batch, length, n_heads * head_dim)  # (B, T, H * d_head)


def gate_heads(heads: Tensor, head_mask: Tensor | None) -> Tensor:
    """Multiply each head's output (B, H, T, d_head) by its gate: ``head_mask`` (H,) or (B, H).

    Michel et al.'s xi_h: 1 keeps head h, 0 removes it, and since the product is differentiable
    d loss / d xi_h is one backward pass. ``None`` leaves the heads untouched.
    """
    if head_mask is None:
        return heads
    gates = head_mask[..., None, None]  # (H, 1, 1) or (B, H, 1, 1)
    return heads * gates  # (B, H, T, d_head)


def repeat_kv(x: Tensor, n_repeats: int) -> Tensor:
    """(B, H_kv, S, d_head) -> (B, H_kv * n_repeats, S, d_head), each head repeated in place.

    Query head h uses key/value head h // n_repeats, so copies of one head must sit next to each
    other: ``repeat_interleave`` gives [k0, k0, k1, k1]. ``repeat`` would tile [k0, k1, k0, k1]
    and silently pair query heads with the wrong group.
    """
    check_tensor("x", x, "(B, H_kv, S, d_head)", rank=4)
    check_int("n_repeats", n_repeats)
    return x.repeat_interleave(n_repeats, dim=1)  # (B, H, S, d_head)
