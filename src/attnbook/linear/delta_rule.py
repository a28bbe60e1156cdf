"""The gated delta rule: a d_k x d_v memory that is decayed, corrected and written token by token.

Per head, with a state S (d_k, d_v) and a query, key, value q_t, k_t (d_k), v_t (d_v):

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T q_t.

Written the other way round, S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T:
the state reads what it holds under the key, and writes the *correction* towards v_t (Schlag
et al., 2021, the delta rule), after forgetting a fraction 1 - alpha_t of everything (Yang,
Kautz and Hatamizadeh, 2025, Gated DeltaNet). alpha = 1 is DeltaNet. q and k are used as given;
normalising them (DeltaNet L2-normalises k so that I - beta k k^T is a contraction) is the
caller's job.

:func:`gated_delta_rule` runs it two ways that give the same numbers:

* ``chunk_size=None``: the recurrence, one token at a time (T sequential steps).
* ``chunk_size=C``: the chunked form of Yang et al. (NeurIPS 2024). Inside a chunk the
  corrections u_t solve a unit lower-triangular system (the "UT transform" behind the WY
  representation), so a chunk is a few matrix products; only T / C steps are sequential.
"""

import torch
from torch import Tensor

from attnbook.core._checks import check_int
from attnbook.linear._checks import check_gate, check_qkv, check_state


def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    alpha: Tensor,
    beta: Tensor,
    *,
    chunk_size: int | None = None,
    initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Outputs (B, H, T, d_v) and final state (B, H, d_k, d_v) of the gated delta rule.

    q, k (B, H, T, d_k); v (B, H, T, d_v); alpha (B, H, T) in (0, 1] (the decay, 1 = keep
    everything); beta (B, H, T) in [0, 1] (the write strength). ``initial_state`` (default
    zeros) is S_0; passing one run's final state continues it exactly. ``chunk_size=None`` runs
    the recurrence, an int the chunked form (any T: the last chunk is padded with tokens that
    change nothing). Bad shapes or gates outside their ranges raise ``ValueError``.
    """
    check_qkv(q, k, v)
    check_gate("alpha", alpha, q, low_open=True)
    check_gate("beta", beta, q, low_open=False)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size)
    if initial_state is None:
        # (B, H, d_k, d_v)
        initial_state = q.new_zeros(*q.shape[:2], q.size(-1), v.size(-1))
    else:
        check_state(initial_state, q, v)
    if chunk_size is None:
        return _recurrent(q, k, v, alpha, beta, initial_state)
    return _chunked(q, k, v, alpha, beta, initial_state, chunk_size)


def delta_rule_step(
    state: Tensor, q: Tensor, k: Tensor, v: Tensor, alpha: Tensor, beta: Tensor
) -> tuple[Tensor, Tensor]:
    """One token: state (B, H, d_k, d_v), q, k (B, H, d_k), v (B, H, d_v), alpha, beta (B, H).

    Returns (o (B, H, d_v), the new state). No checks: the inner step of the recurrence and of
    decoding, whose callers check once.
    """
    # (B, H, d_v): what the state holds under k
    recalled = torch.einsum("bhkv,bhk->bhv", state, k)
    alpha, beta = alpha[..., None], beta[..., None]  # (B, H, 1)
    correction = beta * (v - alpha * recalled)  # (B, H, d_v)
    # (B, H, d_k, d_v)
    state = alpha[..., None] * state + k[..., :, None] * correction[..., None, :]
    return torch.einsum("bhkv,bhk->bhv", state, q), state  # (B, H, d_v), (B, H, d_k, d_v)


def _recurrent(q, k, v, alpha, beta, state) -> tuple[Tensor, Tensor]:
    outputs = []
    for t in range(q.size(2)):
        o, state = delta_rule_step(
            state, q[:, :, t], k[:, :, t], v[:, :, t], alpha[:, :, t], beta[:, :, t]
        )
        outputs.append(o)
    if not outputs:
        return v.new_zeros(v.shape), state
    return torch.stack(outputs, dim=2), state  # (B, H, T, d_v), (B, H, d_k, d_v)


def _pad_to_chunks(q, k, v, alpha, beta, chunk_size):
    """Pad T to a multiple of C with q = k = v = 0, alpha = 1, beta = 0: tokens that do nothing."""
    pad = -q.size(2) % chunk_size
    if not pad:
        return q, k, v, alpha, beta
    pad_rows = (0, 0, 0, pad)  # the T dim of (B, H, T, d)
    q, k, v = (torch.nn.functional.pad(x, pad_rows) for x in (q, k, v))  # (B, H, T + pad, d)
    alpha = torch.nn.functional.pad(alpha, (0, pad), value=1.0)  # (B, H, T + pad)
    beta = torch.nn.functional.pad(beta, (0, pad))  # (B, H, T + pad)
    return q, k, v, alpha, beta


def chunk_corrections(k, v, log_decay, beta) -> tuple[Tensor, Tensor]:
    """The UT transform of every chunk: W (B, H, N, C, d_k) and U0 (B, H, N, C, d_v).

    k (B, H, N, C, d_k), v (B, H, N, C, d_v), log_decay (B, H, N, C) = log of gamma_t (the
    decay from the chunk's start to t, inclusive), beta (B, H, N, C). With A = I + diag(beta) M,
    M[t, i] = (gamma_t / gamma_i) k_t . k_i for i < t, the corrections of the chunk are
    U = U0 - W S_0 where U0 = A^{-1} diag(beta) V and W = A^{-1} diag(beta gamma) K.
    """
    size = k.size(-2)
    strictly_lower = torch.ones(size, size, dtype=torch.bool, device=k.device).tril(-1)
    # (B, H, N, C, C): gamma_t / gamma_i below the diagonal, 0 elsewhere (no overflow above it)
    ratio = (log_decay[..., :, None] - log_decay[..., None, :]).masked_fill(~strictly_lower, 0.0)
    decay = ratio.exp().masked_fill(~strictly_lower, 0.0)
    # (B, H, N, C, C): unit lower-triangular
    system = torch.eye(size, dtype=k.dtype, device=k.device) + beta[..., None] * decay * (
        k @ k.transpose(-1, -2)
    )
    rhs = torch.cat([beta[..., None] * v, (beta * log_decay.exp())[..., None] * k], dim=-1)
    # (B, H, N, C, d_v + d_k)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    return solved[..., v.size(-1) :], solved[..., : v.size(-1)]


def chunk_final_state(state, k, u, log_decay) -> Tensor:
    """The state after a chunk, from the state at its start: (..., d_k, d_v).

    state (..., d_k, d_v) is S_0, k (..., C, d_k) the chunk's keys, u (..., C, d_v) its
    corrections, log_decay (..., C) = log gamma_t. The decay ratios gamma_C / gamma_i come from
    differences of log gamma, so a chunk whose gamma_i underflow to 0 still gives finite states.
    """
    carried = log_decay[..., -1, None, None].exp() * state  # (..., d_k, d_v): gamma_C S_0
    faded = (log_decay[..., -1:] - log_decay).exp()  # (..., C): gamma_C / gamma_i
    return carried + (k * faded[..., None]).transpose(-1, -2) @ u


def _chunked(q, k, v, alpha, beta, state, chunk_size) -> tuple[Tensor, Tensor]:
    length = q.size(2)
    if length == 0:
        return v.new_zeros(v.shape), state
    q, k, v, alpha, beta = _pad_to_chunks(q, k, v, alpha, beta, chunk_size)
    batch, heads, padded, _ = q.shape
    n_chunks = padded // chunk_size
    # (B, H, N, C, d)
    q, k, v = (x.reshape(batch, heads, n_chunks, chunk_size, x.size(-1)) for x in (q, k, v))
    # (B, H, N, C): log gamma_t, the decay from the chunk's start to t
    log_decay = alpha.log().reshape(batch, heads, n_chunks, chunk_size).cumsum(-1)
    beta = beta.reshape(batch, heads, n_chunks, chunk_size)  # (B, H, N, C)
    w, u0 = chunk_corrections(k, v, log_decay, beta)  # (B, H, N, C, d_k), (B, H, N, C, d_v)
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    # (B, H, N, C, C): gamma_t / gamma_i on and below the diagonal
    gaps = (log_decay[..., :, None] - log_decay[..., None, :]).masked_fill(~causal, 0.0)
    scores = (q @ k.transpose(-1, -2)) * gaps.exp().masked_fill(~causal, 0.0)
    decay_in = log_decay.exp()  # (B, H, N, C): gamma_t
    outputs = []
    for n in range(n_chunks):
        u = u0[:, :, n] - w[:, :, n] @ state  # (B, H, C, d_v)
        # (B, H, C, d_v): what S_0 gives every query, plus the chunk's own writes
        outputs.append(decay_in[:, :, n, :, None] * (q[:, :, n] @ state) + scores[:, :, n] @ u)
        state = chunk_final_state(state, k[:, :, n], u, log_decay[:, :, n])  # (B, H, d_k, d_v)
    output = torch.cat(outputs, dim=2)[:, :, :length]  # (B, H, T, d_v)
    return output, state
