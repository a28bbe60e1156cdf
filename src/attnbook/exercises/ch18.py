"""Chapter 18's exercise checkers: the delta rule's update, its erase's gain, orthonormal keys,
the state a chunk leaves."""

from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)
from attnbook.linear.delta_rule import gated_delta_rule

# Chapter 18: linear attention and the delta rule.


def _step_case(seed: int, d_k: int = 4, d_v: int = 3):
    generator = _generator(seed)
    state = torch.randn(d_k, d_v, generator=generator, dtype=torch.float64)
    k = torch.randn(d_k, generator=generator, dtype=torch.float64)
    k = k / k.norm()
    v = torch.randn(d_v, generator=generator, dtype=torch.float64)
    return state, k, v


@_checker
def check_delta_rule_step(fn: Callable[[Tensor, Tensor, Tensor, float, float], Tensor]) -> None:
    """``fn(S (d_k, d_v), k (d_k), v (d_v), alpha, beta)`` -> S_t of the gated delta rule."""
    for seed, alpha, beta in [(0, 1.0, 1.0), (1, 1.0, 0.5), (2, 0.8, 0.7), (3, 0.5, 0.0)]:
        state, k, v = _step_case(seed)
        call = f"delta_rule_step(S (4, 3), k (4,), v (3,), alpha={alpha}, beta={beta})"
        result = _as_tensor(
            _call(fn, call, state.clone(), k.clone(), v.clone(), alpha, beta), call, "a tensor"
        )
        if tuple(result.shape) != (4, 3):
            _fail(
                f"{call} should return the new state of shape (d_k, d_v) = (4, 3), got "
                f"{tuple(result.shape)}"
            )
        recalled = state.T @ k  # (d_v,)
        expected = alpha * state + beta * torch.outer(k, v - alpha * recalled)  # (d_k, d_v)
        if _close(result, expected, atol=1e-6):
            continue
        if _close(result, alpha * state + beta * torch.outer(k, v), atol=1e-6):
            _fail(
                f"{call}: you added beta k v^T, linear attention's write; write v minus what "
                "alpha S already holds under k"
            )
        if _close(result, alpha * state + beta * torch.outer(k, v - recalled), atol=1e-6):
            _fail(
                f"{call}: the correction reads S before its decay; read what alpha S holds "
                "(S_t = alpha (I - beta k k^T) S + beta k v^T)"
            )
        if _close(result, state + beta * torch.outer(k, v - recalled), atol=1e-6):
            _fail(f"{call}: S was not decayed: multiply the old state by alpha")
        if _close(result, alpha * (state + beta * torch.outer(k, v - recalled)), atol=1e-6):
            _fail(
                f"{call}: you decayed after writing, so the new pair fades at its own step; "
                "decay the old state first, then write (S_t = alpha (I - beta k k^T) S + beta "
                "k v^T)"
            )
        _fail(f"{call}: expected alpha (I - beta k k^T) S + beta k v^T")
    _succeed("S_t = alpha (I - beta k k^T) S + beta k v^T: decay, erase what k held, write v")


@_checker
def check_erase_gain(fn: Callable[[float, float], object]) -> None:
    """``fn(norm, beta)`` -> the spectral norm of I - beta k k^T for a key k of length ``norm``."""
    for norm, beta in [(3.0, 1.0), (1.0, 0.5), (2.0, 1.0), (0.5, 1.0), (1.5, 0.5), (1.0, 1.0)]:
        call = f"erase_gain(norm={norm}, beta={beta})"
        result = _call(fn, call, norm, beta)
        if torch.is_tensor(result):
            if result.numel() != 1:
                _fail(f"{call} should return one number, got shape {tuple(result.shape)}")
            result = result.item()
        if not isinstance(result, int | float):
            _fail(f"{call} should return a number, got {type(result).__name__}")
        key = torch.randn(4, generator=_generator(0), dtype=torch.float64)
        key = norm * key / key.norm()  # (d_k,) of length `norm`
        erase = torch.eye(4, dtype=torch.float64) - beta * torch.outer(key, key)  # (d_k, d_k)
        expected = torch.linalg.matrix_norm(erase, ord=2).item()
        if abs(result - expected) <= 1e-6:
            continue
        if result < 0:
            _fail(
                f"{call}: {result:.4g} is negative; along k the factor 1 - beta |k|^2 can be "
                "negative, and a memory's length scales by its absolute value"
            )
        if result < 1 - 1e-6:
            _fail(
                f"{call}: {result:.4g} is below 1, but the directions orthogonal to k keep "
                "their length (eigenvalue 1), so the gain is never below 1"
            )
        if abs(result - max(1.0, abs(1 - beta * norm))) <= 1e-6:
            _fail(
                f"{call}: k k^T grows with the square of the key's length: along k the "
                "factor is 1 - beta |k|^2"
            )
        _fail(
            f"{call}: expected {expected:.4g}, the largest factor by which I - beta k k^T "
            "stretches a vector"
        )
    _succeed(
        "the gain is max(1, |1 - beta |k|^2|): one write never stretches the memory when "
        "beta |k|^2 <= 2, and with unit keys and beta in (0, 1) never"
    )


@_checker
def check_orthonormal_keys(fn: Callable[[int, int, torch.Generator], Tensor]) -> None:
    """``fn(P, d_k, generator)`` -> (P, d_k): P <= d_k unit keys, mutually orthogonal."""
    for seed, (count, d_k) in enumerate([(4, 8), (8, 8), (3, 16), (1, 2)]):
        call = f"orthonormal_keys(P={count}, d_k={d_k}, generator)"
        result = _as_tensor(_call(fn, call, count, d_k, _generator(seed)), call, "a tensor")
        if tuple(result.shape) != (count, d_k):
            _fail(
                f"{call} should return one key per row, shape ({count}, {d_k}), got "
                f"{tuple(result.shape)}"
            )
        keys = result.double()  # (P, d_k)
        lengths = keys.norm(dim=-1)  # (P,)
        overlaps = keys @ keys.T - torch.diag(lengths.square())  # (P, P), 0 on the diagonal
        if not _close(lengths, torch.ones(count, dtype=torch.float64), atol=1e-6):
            if overlaps.abs().max() < 1e-6:
                _fail(
                    f"{call}: the rows are orthogonal but not of unit length (lengths "
                    f"{[round(x, 3) for x in lengths.tolist()]}); normalise each row"
                )
            _fail(
                f"{call}: each row (a key) must have length 1, got lengths "
                f"{[round(x, 3) for x in lengths.tolist()]}"
            )
        if overlaps.abs().max() > 1e-6:
            _fail(
                f"{call}: the rows have unit length but overlap (largest k_i . k_j = "
                f"{overlaps.abs().max().item():.3f}); orthogonalise them, e.g. with "
                "torch.linalg.qr of a (d_k, P) random matrix"
            )
    call = "orthonormal_keys(P=4, d_k=8, generator)"
    first = _as_tensor(_call(fn, call, 4, 8, _generator(10)), call, "a tensor")
    again = _as_tensor(_call(fn, call, 4, 8, _generator(10)), call, "a tensor")
    if not _close(first.double(), again.double(), atol=1e-9):
        _fail(
            f"{call}: two generators with the same seed gave different keys; draw the "
            "keys with the generator passed in (torch.randn(..., generator=generator)), "
            "not from the global random state"
        )
    second = _as_tensor(_call(fn, call, 4, 8, _generator(11)), call, "a tensor")
    if _close(first.double(), second.double(), atol=1e-9):
        _fail(
            f"{call}: two different generators gave the same keys; the keys must be "
            "random, drawn with the generator (fixed ones such as torch.eye(d_k)[:P] "
            "are orthonormal but always the same)"
        )
    _succeed(
        "P orthonormal keys: each delta-rule write erases only along its own key, so "
        "every one of up to d_k pairs is read back exactly"
    )


def _chunk_case(seed: int, C: int, d_k: int = 4, d_v: int = 3):
    """One head's chunk: S_0, K, the corrections U, gamma, and gated_delta_rule's end state."""
    generator = _generator(seed)
    q = torch.randn(C, d_k, generator=generator, dtype=torch.float64)  # (C, d_k)
    keys = torch.randn(C, d_k, generator=generator, dtype=torch.float64)
    keys = keys / keys.norm(dim=-1, keepdim=True)  # (C, d_k), unit rows
    values = torch.randn(C, d_v, generator=generator, dtype=torch.float64)  # (C, d_v)
    alpha = 0.5 + 0.5 * torch.rand(C, generator=generator, dtype=torch.float64)  # (C,)
    beta = torch.rand(C, generator=generator, dtype=torch.float64)  # (C,)
    start = torch.randn(d_k, d_v, generator=generator, dtype=torch.float64)  # S_0
    state, corrections = start, []
    for t in range(C):  # u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t)
        correction = beta[t] * (values[t] - alpha[t] * state.T @ keys[t])  # (d_v,)
        state = alpha[t] * state + torch.outer(keys[t], correction)  # (d_k, d_v)
        corrections.append(correction)
    # (1, 1, ...) each: B = H = 1
    inputs = [x[None, None] for x in (q, keys, values, alpha, beta)]
    _, end = gated_delta_rule(*inputs, initial_state=start[None, None])  # (1, 1, d_k, d_v)
    return start, keys, torch.stack(corrections), alpha.cumprod(0), end[0, 0]


def _chunk_hint(
    result: Tensor, call: str, start: Tensor, keys: Tensor, corrections: Tensor, gamma: Tensor
) -> None:
    """Name the slip when ``result`` is one of the plausible wrong end states."""

    def summed(fade: Tensor, carried: Tensor) -> Tensor:
        # carried S_0 plus sum_i fade_i k_i u_i^T: (d_k, d_v)
        return carried + (keys * fade[:, None]).T @ corrections

    earlier = torch.cat([gamma.new_ones(1), gamma[:-1]])  # (C,): gamma_{i-1}
    if _close(result, summed(torch.ones_like(gamma), gamma[-1] * start), atol=1e-9):
        _fail(
            f"{call}: the chunk's pairs were not faded; the pair written at step i "
            "fades by alpha_{i+1} ... alpha_C = gamma_C / gamma_i before the chunk ends"
        )
    if _close(result, summed(gamma, gamma[-1] * start), atol=1e-9):
        _fail(
            f"{call}: you faded pair i by gamma_i, the decay before it was written; it "
            "fades by what comes after it, gamma_C / gamma_i"
        )
    if _close(result, summed(gamma[-1] / earlier, gamma[-1] * start), atol=1e-9):
        _fail(
            f"{call}: pair i was faded by its own alpha_i too; each step decays the "
            "memory before it writes, so pair i fades by gamma_C / gamma_i"
        )
    if _close(result, summed(gamma[-1] / gamma, start), atol=1e-9):
        _fail(f"{call}: S_0 was not faded; it decays through the whole chunk: gamma_C S_0")


@_checker
def check_chunk_end_state(fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> None:
    """``fn(S0 (d_k, d_v), K (C, d_k), U (C, d_v), gamma (C,))`` -> S_C (d_k, d_v)."""
    for seed, C in [(0, 6), (1, 8), (2, 1)]:
        start, keys, corrections, gamma, end = _chunk_case(seed, C)
        call = f"chunk_end_state(S0 (4, 3), K ({C}, 4), U ({C}, 3), gamma ({C},))"
        args = (start.clone(), keys.clone(), corrections.clone(), gamma.clone())
        result = _as_tensor(_call(fn, call, *args), call, "a tensor")
        if tuple(result.shape) != (4, 3):
            _fail(
                f"{call} should return the state of shape (d_k, d_v) = (4, 3), got "
                f"{tuple(result.shape)}"
            )
        if _close(result, end, atol=1e-9):
            continue
        _chunk_hint(result, call, start, keys, corrections, gamma)
        _fail(
            f"{call}: expected gated_delta_rule's state after the chunk, "
            "gamma_C S_0 + sum_i (gamma_C / gamma_i) k_i u_i^T"
        )
    _succeed(
        "S_C = gamma_C S_0 + K^T diag(gamma_C / gamma) U: the chunk's state in two matrix "
        "products, whatever C is"
    )
