"""AdditiveAttention: Bahdanau's score v^T tanh(W_q q + W_k k), checked term by term."""

import pytest
import torch
from helpers import DEVICES

from attnbook import AdditiveAttention, padding_mask, set_seed


def loop_reference(module, query, keys, values):
    """One query and one key at a time, as the formula is written in the paper."""
    batch, n_queries, n_keys = query.size(0), query.size(1), keys.size(1)
    scores = torch.empty(batch, n_queries, n_keys, dtype=torch.float64)
    for b in range(batch):
        for t in range(n_queries):
            for j in range(n_keys):
                hidden = torch.tanh(
                    module.W_q.weight @ query[b, t] + module.W_k.weight @ keys[b, j]
                )
                scores[b, t, j] = module.v.weight[0] @ hidden
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "mps"])  # MPS has no float64
def test_matches_loop_reference_in_float64(device):
    set_seed(0)
    module = AdditiveAttention(6, 5, 7).double()
    query, keys, values = torch.randn(2, 3, 6), torch.randn(2, 4, 5), torch.randn(2, 4, 3)
    query, keys, values = (t.double() for t in (query, keys, values))
    expected_context, expected_weights = loop_reference(module, query, keys, values)
    module = module.to(device)
    context, weights = module(query.to(device), keys.to(device), values.to(device))
    torch.testing.assert_close(context.cpu(), expected_context)
    torch.testing.assert_close(weights.cpu(), expected_weights)


def test_padding_gets_zero_weight_and_rows_sum_to_one():
    set_seed(0)
    module = AdditiveAttention(6, 5, 7)
    query, keys, values = torch.randn(2, 1, 6), torch.randn(2, 4, 5), torch.randn(2, 4, 3)
    keep = padding_mask([4, 2], 4)[:, None, :]  # (B, 1, S)
    context, weights = module(query, keys, values, keep)
    assert torch.equal(weights[1, :, 2:], torch.zeros(1, 2))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1))
    padded_values = values.clone()
    padded_values[1, 2:] = 1e6  # whatever sits in the padding cannot leak into the context
    torch.testing.assert_close(module(query, keys, padded_values, keep)[0], context)


def test_gradcheck_float64():
    set_seed(0)
    module = AdditiveAttention(3, 3, 4).double()
    inputs = [torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    assert torch.autograd.gradcheck(lambda q, k, v: module(q, k, v)[0], inputs)
