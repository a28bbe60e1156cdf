"""Converting multi-head attention into grouped-query attention by mean-pooling key/value heads.

:func:`mean_pool_kv_heads` turns a multi-head (or grouped-query) attention module into one with
fewer key/value heads by averaging the key and value projections of each group, the conversion
of Ainslie et al. (2023).
"""

import torch

from attnbook.core._checks import check_int
from attnbook.layers.multihead import GroupedQueryAttention


def _pool_rows(weight: torch.Tensor, n_groups: int, group_size: int) -> torch.Tensor:
    """Average each group of ``group_size`` consecutive heads of a projection's output rows.

    A projection weight is (H_kv_src * d_head, width), width = key_dim or value_dim (a bias is
    (H_kv_src * d_head,)): head j owns rows j * d_head ... (j + 1) * d_head - 1, so the heads of
    one group are consecutive blocks.
    """
    trailing = weight.shape[1:]  # (width,) for a weight, () for a bias
    heads = weight.reshape(n_groups, group_size, -1, *trailing)  # (H_kv, G, d_head, ...)
    return heads.mean(dim=1).reshape(-1, *trailing)  # (H_kv * d_head, ...)


def mean_pool_kv_heads(attention: GroupedQueryAttention, n_kv_heads: int) -> GroupedQueryAttention:
    """A new :class:`GroupedQueryAttention` with ``n_kv_heads`` key/value heads, made by averaging.

    ``attention`` is a :class:`MultiHeadAttention` or a :class:`GroupedQueryAttention` with
    H_kv_src key/value heads; ``n_kv_heads`` must divide H_kv_src. Its key/value heads are cut
    into ``n_kv_heads`` groups of consecutive heads (the heads whose query heads will share one
    key/value head) and each group's key and value projections (weights and biases) are
    averaged. The query and output projections are copied. ``attention`` is left unchanged; the
    result has its device, dtype, training mode, key and value widths and rotary settings. With
    ``n_kv_heads`` equal to H_kv_src it is an exact copy; otherwise it approximates
    ``attention`` (Ainslie et al. fine-tune it further).
    """
    if not isinstance(attention, GroupedQueryAttention):
        raise ValueError(
            "attention: expected a MultiHeadAttention or GroupedQueryAttention, got "
            f"{type(attention).__name__}"
        )
    check_int("n_kv_heads", n_kv_heads)
    if attention.n_kv_heads % n_kv_heads:
        raise ValueError(
            f"n_kv_heads: {n_kv_heads} does not divide the {attention.n_kv_heads} key/value heads "
            f"of attention; each new head must average the same number of old ones"
        )
    group_size = attention.n_kv_heads // n_kv_heads
    reference = attention.q_proj.weight
    pooled = GroupedQueryAttention(
        attention.d_model,
        attention.n_heads,
        n_kv_heads,
        bias=attention.q_proj.bias is not None,
        dropout=attention.dropout,
        rope=attention.rope,
        rope_base=attention.rope_base,
        rope_layout=attention.rope_layout,
        key_dim=attention.key_dim,
        value_dim=attention.value_dim,
    ).to(device=reference.device, dtype=reference.dtype)
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            for param_name, param in getattr(attention, name).named_parameters():
                getattr(getattr(pooled, name), param_name).copy_(param)
        for name in ("k_proj", "v_proj"):
            for param_name, param in getattr(attention, name).named_parameters():
                target = getattr(getattr(pooled, name), param_name)
                target.copy_(_pool_rows(param, n_kv_heads, group_size))
    return pooled.train(attention.training)
