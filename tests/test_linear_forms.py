"""Linear attention and the gated delta rule: every form gives the same numbers and gradients.

Each form is also checked against an independent float64 reference written here from the
definition (a loop over the explicit matrices), so a bug shared by two forms cannot hide.
"""

import functools
import math

import pytest
import torch
from torch.nn import functional as F

from attnbook.linear.delta_rule import chunk_final_state, gated_delta_rule
from attnbook.linear.linear_attention import linear_attention, linear_attention_weights

TOLERANCES = {torch.float64: 1e-10, torch.float32: 2e-5}


def inputs(dtype, batch=2, heads=3, length=37, d_k=8, d_v=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, d_k, generator=generator, dtype=dtype)
    k = F.normalize(
        torch.randn(batch, heads, length, d_k, generator=generator, dtype=dtype), dim=-1
    )
    v = torch.randn(batch, heads, length, d_v, generator=generator, dtype=dtype)
    alpha = 0.5 + 0.5 * torch.rand(batch, heads, length, generator=generator, dtype=dtype)
    beta = torch.rand(batch, heads, length, generator=generator, dtype=dtype)
    return q, k, v, alpha, beta


@functools.cache
def reference_delta_rule(dtype):
    """S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T q_t.

    With the explicit (d_k, d_k) matrix of every step, in float64, for ``inputs(dtype)``.
    """
    q, k, v, alpha, beta = (x.double() for x in inputs(dtype))
    batch, heads, length, d_k = q.shape
    eye = torch.eye(d_k, dtype=torch.float64)
    state = torch.zeros(batch, heads, d_k, v.size(-1), dtype=torch.float64)
    out = []
    for t in range(length):
        kt = k[:, :, t, :, None]  # (B, H, d_k, 1)
        erase = eye - beta[:, :, t, None, None] * kt @ kt.transpose(-1, -2)  # (B, H, d_k, d_k)
        write = beta[:, :, t, None, None] * kt @ v[:, :, t, None, :]  # (B, H, d_k, d_v)
        state = alpha[:, :, t, None, None] * erase @ state + write
        out.append((state.transpose(-1, -2) @ q[:, :, t, :, None])[..., 0])
    return torch.stack(out, dim=2), state


def reference_linear_attention(q, k, v):
    """Katharopoulos et al.'s causal formula, one query at a time, in float64."""
    q, k, v = (F.elu(x.double()) + 1 if x is not v else x.double() for x in (q, k, v))
    out = torch.empty(*q.shape[:3], v.size(-1), dtype=torch.float64)
    for t in range(q.size(2)):
        weights = (q[:, :, t : t + 1] * k[:, :, : t + 1]).sum(-1)  # (B, H, t + 1)
        out[:, :, t] = (weights[..., None] * v[:, :, : t + 1]).sum(2) / weights.sum(-1)[..., None]
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("chunk_size", [None, 1, 4, 16, 64])
def test_gated_delta_rule_forms_match_the_definition(dtype, chunk_size):
    q, k, v, alpha, beta = inputs(dtype)
    expected, expected_state = reference_delta_rule(dtype)
    out, state = gated_delta_rule(q, k, v, alpha, beta, chunk_size=chunk_size)
    assert out.dtype == state.dtype == dtype
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=TOLERANCES[dtype])
    torch.testing.assert_close(state.double(), expected_state, rtol=0, atol=TOLERANCES[dtype])


def test_alpha_one_is_the_plain_delta_rule_and_beta_zero_writes_nothing():
    q, k, v, _, beta = inputs(torch.float64)
    ones = torch.ones_like(beta)
    # DeltaNet (Schlag et al.): S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T
    state = torch.zeros(2, 3, 8, 5, dtype=torch.float64)
    for t in range(q.size(2)):
        recalled = torch.einsum("bhkv,bhk->bhv", state, k[:, :, t])
        error = beta[:, :, t, None] * (v[:, :, t] - recalled)
        state = state + k[:, :, t, :, None] * error[:, :, None, :]
    _, final = gated_delta_rule(q, k, v, ones, beta, chunk_size=8)
    torch.testing.assert_close(final, state, rtol=0, atol=1e-10)
    out, final = gated_delta_rule(q, k, v, ones, torch.zeros_like(beta), chunk_size=8)
    assert not out.any() and not final.any()


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_gated_delta_rule_is_every_write_carried_through_the_later_steps(chunk_size):
    """A second reference, with no recurrence: per head, with the transitions
    A_j = alpha_j (I - beta_j k_j k_j^T) as explicit matrices,
    S_t = A_t ... A_1 S_0 + sum_{i <= t} A_t ... A_{i+1} beta_i k_i v_i^T and o_t = S_t^T q_t."""
    q, k, v, alpha, beta = inputs(torch.float64, batch=1, heads=2, length=9, d_k=4, d_v=3, seed=3)
    start = torch.randn(1, 2, 4, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    out, final = gated_delta_rule(q, k, v, alpha, beta, chunk_size=chunk_size, initial_state=start)
    eye = torch.eye(4, dtype=torch.float64)
    for head in range(2):
        qh, kh, vh, ah, bh = (x[0, head] for x in (q, k, v, alpha, beta))
        steps = [ah[j] * (eye - bh[j] * torch.outer(kh[j], kh[j])) for j in range(9)]

        def carried(first, last, steps=steps):
            # A_last ... A_first (the identity when first > last)
            product = eye
            for step in steps[first : last + 1]:
                product = step @ product
            return product

        for t in range(9):
            writes = sum(
                carried(i + 1, t) @ (bh[i] * torch.outer(kh[i], vh[i])) for i in range(t + 1)
            )
            state = carried(0, t) @ start[0, head] + writes
            torch.testing.assert_close(out[0, head, t], state.T @ qh[t], rtol=0, atol=1e-12)
        torch.testing.assert_close(final[0, head], state, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk_size", [None, 5])
def test_initial_state_continues_a_split_sequence_exactly(chunk_size):
    q, k, v, alpha, beta = inputs(torch.float64)
    whole, whole_state = gated_delta_rule(q, k, v, alpha, beta, chunk_size=4)
    cut = 13
    first, state = gated_delta_rule(
        *(x[:, :, :cut] for x in (q, k, v, alpha, beta)), chunk_size=chunk_size
    )
    second, state = gated_delta_rule(
        *(x[:, :, cut:] for x in (q, k, v, alpha, beta)),
        chunk_size=chunk_size,
        initial_state=state,
    )
    torch.testing.assert_close(torch.cat([first, second], dim=2), whole, rtol=0, atol=1e-10)
    torch.testing.assert_close(state, whole_state, rtol=0, atol=1e-10)


def test_gated_delta_rule_gradients_are_finite_and_equal_across_forms():
    leaves = [x.requires_grad_() for x in inputs(torch.float64, length=19)]
    grads = []
    for chunk_size in (None, 4, 32):
        out, state = gated_delta_rule(*leaves, chunk_size=chunk_size)
        grads.append(torch.autograd.grad((out.sin().sum() + state.cos().sum()), leaves))
    for grad in grads[1:]:
        for got, expected in zip(grad, grads[0], strict=True):
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def test_gated_delta_rule_accepts_tiny_decays_without_nan():
    q, k, v, alpha, beta = inputs(torch.float32, length=64)
    alpha = torch.full_like(alpha, 1e-30).requires_grad_()
    out, state = gated_delta_rule(q, k, v, alpha, beta, chunk_size=64)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(alpha.grad).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
@pytest.mark.parametrize("causal", [True, False])
def test_linear_attention_forms_match_the_definition(dtype, form, causal):
    q, k, v, _, _ = inputs(dtype)
    out = linear_attention(q, k, v, form=form, causal=causal, chunk_size=6)
    if causal:
        expected = reference_linear_attention(q, k, v)
    else:
        phi_q, phi_k = F.elu(q.double()) + 1, F.elu(k.double()) + 1
        weights = phi_q @ phi_k.transpose(-1, -2)
        expected = (weights / weights.sum(-1, keepdim=True)) @ v.double()
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=TOLERANCES[dtype])


def test_linear_attention_gradients_are_finite_and_equal_across_forms():
    q, k, v, _, _ = inputs(torch.float64, length=17)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    grads = [
        torch.autograd.grad(linear_attention(*leaves, form=form, chunk_size=5).sum(), leaves)
        for form in ("parallel", "recurrent", "chunked")
    ]
    for grad in grads[1:]:
        for got, expected in zip(grad, grads[0], strict=True):
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def test_linear_attention_weights_are_what_the_parallel_form_applies():
    q, k, v, _, _ = inputs(torch.float64)
    weights = linear_attention_weights(q, k)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 37, dtype=torch.float64))
    assert not weights.triu(1).any()
    torch.testing.assert_close(weights @ v, linear_attention(q, k, v), rtol=0, atol=1e-12)


def test_empty_sequences_give_empty_outputs_and_the_initial_state():
    q, k, v, alpha, beta = inputs(torch.float64, length=0)
    start = torch.randn(2, 3, 8, 5, dtype=torch.float64)
    for chunk_size in (None, 4):
        out, state = gated_delta_rule(
            q, k, v, alpha, beta, chunk_size=chunk_size, initial_state=start
        )
        assert out.shape == (2, 3, 0, 5) and torch.equal(state, start)
    for form in ("parallel", "recurrent", "chunked"):
        assert linear_attention(q, k, v, form=form).shape == (2, 3, 0, 5)


def test_chunk_final_state_is_the_recurrences_state_at_the_chunks_end():
    q, k, v, alpha, beta = (x[0, 0] for x in inputs(torch.float64, length=9))
    start = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    state, corrections = start, []
    for t in range(9):  # the recurrence, keeping each correction u_t
        u = beta[t] * (v[t] - alpha[t] * state.T @ k[t])
        state = alpha[t] * state + torch.outer(k[t], u)
        corrections.append(u)
    got = chunk_final_state(start, k, torch.stack(corrections), alpha.log().cumsum(0))
    torch.testing.assert_close(got, state, rtol=0, atol=1e-12)
    _, library = gated_delta_rule(
        *(x[None, None] for x in (q, k, v, alpha, beta)),
        initial_state=start[None, None],
        chunk_size=9,
    )
    torch.testing.assert_close(got, library[0, 0], rtol=0, atol=1e-12)


def test_chunk_final_state_stays_finite_where_gamma_underflows():
    k = F.normalize(torch.randn(64, 4, dtype=torch.float32), dim=-1)
    u, start = torch.randn(64, 3), torch.randn(4, 3)
    log_gamma = torch.full((64,), math.log(1e-30)).cumsum(0)  # gamma_t underflows to 0
    got = chunk_final_state(start, k, u, log_gamma)
    torch.testing.assert_close(got, torch.outer(k[-1], u[-1]))
