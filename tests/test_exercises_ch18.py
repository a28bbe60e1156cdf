"""Chapter 18's checkers pass the reference solutions and name the typical mistakes."""

import torch
from solutions_ch18 import chunk_decays, delta_rule_step
from test_exercises import expect_message, expect_success

from attnbook import exercises


def test_delta_rule_step(capsys):
    check = exercises.check_delta_rule_step
    expect_success(check, delta_rule_step, capsys)
    plain = lambda S, k, v, a, b: a * S + b * torch.outer(k, v)  # noqa: E731
    expect_message(check, plain, "linear attention's write")
    undecayed_read = lambda S, k, v, a, b: a * S + b * torch.outer(k, v - S.T @ k)  # noqa: E731
    expect_message(check, undecayed_read, "reads S before its decay")
    no_decay = lambda S, k, v, a, b: S + b * torch.outer(k, v - S.T @ k)  # noqa: E731
    expect_message(check, no_decay, "multiply the old state by alpha")
    transposed = lambda S, k, v, a, b: delta_rule_step(S, k, v, a, b).T  # noqa: E731
    expect_message(check, transposed, "shape (d_k, d_v) = (4, 3)")


def test_chunk_decays(capsys):
    check = exercises.check_chunk_decays
    expect_success(check, chunk_decays, capsys)
    expect_message(check, lambda a: chunk_decays(a).T, "rows are queries t")
    strict = lambda a: chunk_decays(a).tril(-1)  # noqa: E731
    expect_message(check, strict, "the diagonal must be 1")

    def inclusive(alpha):  # decays key i's write by alpha_i too
        gamma = alpha.cumprod(0)
        previous = torch.cat([torch.ones(1, dtype=alpha.dtype), gamma[:-1]])
        return torch.tril(gamma[:, None] / previous[None, :])

    expect_message(check, inclusive, "decays by alpha_(i+1) ... alpha_t only")
    unmasked = lambda a: a.cumprod(0)[:, None] / a.cumprod(0)[None, :] * torch.inf  # noqa: E731
    expect_message(check, unmasked, "found inf or NaN")
