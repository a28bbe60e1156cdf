"""Head statistics, roles, ablation, gradient importance and pruning on hand-made cases."""

import pytest
import torch
import torch.nn.functional as F

from attnbook import TinyDecoder
from attnbook import head_analysis as analysis

CHARACTERS = list(" abc.")


def one_hot_weights(keys_of_query):
    """(1, 1, 1, T, T) weights where query i puts all its weight on key keys_of_query[i]."""
    length = len(keys_of_query)
    weights = torch.zeros(1, 1, 1, length, length)
    for query, key in enumerate(keys_of_query):
        weights[0, 0, 0, query, key] = 1.0
    return weights


def test_induction_targets_mark_the_character_after_an_earlier_copy():
    tokens = torch.tensor([[1, 2, 3, 1, 2]])  # a b c a b
    targets = analysis.induction_targets(tokens)[0]  # (T, T)
    assert targets[3].nonzero().flatten().tolist() == [1]  # the second "a": key 1 followed "a"
    assert targets[4].nonzero().flatten().tolist() == [2]  # the second "b": key 2 followed "b"
    assert not targets[:3].any()  # nothing repeats before position 3


def test_a_previous_token_head_is_named_so():
    weights = one_hot_weights([0, 0, 1, 2, 3, 4])  # query i -> key i - 1
    tokens = torch.tensor([[1, 2, 3, 1, 2, 3]])
    statistics = analysis.head_statistics(weights, tokens, CHARACTERS)
    assert statistics["previous"].item() == 1.0 and statistics["current"].item() == 0.0
    assert statistics["distance"].item() == pytest.approx(5 / 6)  # 0 for query 0, 1 after
    assert statistics["entropy"].item() == pytest.approx(0.0, abs=1e-9)
    assert analysis.name_roles(statistics) == [["previous character"]]


def test_an_induction_head_and_a_mixed_head():
    tokens = torch.tensor([[1, 2, 3, 1, 2, 3]])  # a b c a b c
    induction = one_hot_weights([0, 1, 2, 1, 2, 3])  # queries 3..5 look after the first copy
    uniform = torch.ones(6, 6).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None, None]  # (1, 1, 1, T, T)
    weights = torch.cat([induction, uniform], dim=2)  # (L, B, H = 2, T, T)
    statistics = analysis.head_statistics(weights, tokens, CHARACTERS)
    uniform_share = (1 / 4 + 1 / 5 + 1 / 6) / 3  # one target key among 4, 5, 6 visible ones
    assert statistics["induction"][0].tolist() == pytest.approx([1.0, uniform_share], abs=1e-7)
    assert analysis.name_roles(statistics) == [["induction (after an earlier copy)", "mixed"]]


@pytest.fixture(scope="module")
def model_and_batch():
    torch.manual_seed(0)
    model = TinyDecoder(5, d_model=8, n_heads=2, n_layers=2, max_len=6).double().eval()
    tokens = torch.randint(0, 5, (3, 7), generator=torch.Generator().manual_seed(1))
    return model, tokens[:, :-1], tokens[:, 1:]


def loss_with(model, inputs, targets, gates):
    logits = model(inputs, head_mask=gates)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_ablation_is_the_loss_change_of_each_gate_set_to_zero(model_and_batch):
    model, inputs, targets = model_and_batch
    increase = analysis.ablation_increase(model, inputs, targets)  # (L, H)
    ones = torch.ones(2, 2, dtype=torch.float64)
    base = loss_with(model, inputs, targets, ones)
    for layer in range(2):
        for head in range(2):
            gates = ones.clone()
            gates[layer, head] = 0
            expected = loss_with(model, inputs, targets, gates) - base
            assert increase[layer, head].item() == pytest.approx(expected.item(), abs=1e-12)


def test_gradient_importance_is_the_mean_absolute_finite_difference(model_and_batch):
    model, inputs, targets = model_and_batch
    importance = analysis.gradient_importance(model, inputs, targets)  # (L, H)
    step = 1e-6
    for layer, head in [(0, 1), (1, 0)]:
        slopes = []
        for window in range(inputs.size(0)):
            losses = []
            for sign in (1, -1):
                gates = torch.ones(2, 2, dtype=torch.float64)
                gates[layer, head] += sign * step
                x, y = inputs[window : window + 1], targets[window : window + 1]
                losses.append(loss_with(model, x, y, gates).item())
            slopes.append(abs(losses[0] - losses[1]) / (2 * step))
        assert importance[layer, head].item() == pytest.approx(sum(slopes) / 3, rel=1e-5)


def test_pruning_everything_and_the_order_helper(model_and_batch):
    model, inputs, targets = model_and_batch
    scores = torch.tensor([[3.0, 1.0], [2.0, 0.5]])
    order = analysis.order_by(scores)
    assert order == [(1, 1), (0, 1), (1, 0), (0, 0)]
    assert analysis.order_by(scores, descending=True) == order[::-1]
    curve = analysis.pruning_curve(model, inputs, targets, order)
    assert len(curve) == 5
    zeros = torch.zeros(2, 2, dtype=torch.float64)
    assert curve[-1] == pytest.approx(loss_with(model, inputs, targets, zeros).item(), abs=1e-12)
