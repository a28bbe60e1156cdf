"""Head statistics, roles, ablation, gradient importance and pruning on hand-made cases; the
statistics over seeds; the shipped head-count comparison (data/head_count_comparison.json)."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from attnbook import CharVocabulary, TinyDecoder, load_genesis, shipped_file, train_validation_split
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


def test_seed_spread_matches_float64_statistics():
    losses = {1: [1.71, 1.64, 1.80], 8: [1.60, 1.62, 1.61, 1.65]}
    spread = analysis.seed_spread(losses)
    for key, values in losses.items():
        reference = torch.tensor(values, dtype=torch.float64)
        std = reference.std(correction=1).item()  # the sample standard deviation
        expected = (reference.mean().item(), std, std / len(values) ** 0.5)
        assert spread[key] == pytest.approx(expected, rel=1e-12)


def test_supported_orderings_ranks_only_separated_intervals():
    apart = {2: [1.00, 1.01, 1.02], 4: [1.50, 1.51, 1.52]}  # se 0.0058, gap 0.5
    assert analysis.supported_orderings(apart) == {(2, 4)}
    overlapping = {2: [1.0, 1.2, 1.4], 4: [1.1, 1.3, 1.5]}  # gap 0.1, 2 se = 0.23 each
    assert analysis.supported_orderings(overlapping) == set()
    assert analysis.supported_orderings(overlapping, n_standard_errors=0.0) == {(2, 4)}
    identical = {1: [1.0, 1.1, 1.2], 2: [1.0, 1.1, 1.2]}
    assert analysis.supported_orderings(identical, n_standard_errors=0.0) == set()


def test_a_single_seed_has_no_spread():
    with pytest.raises(ValueError, match=r"losses: configuration 4 needs at least 2 seeds.*got 1"):
        analysis.supported_orderings({2: [1.0, 1.1], 4: [1.2]})


@pytest.fixture(scope="module")
def comparison():
    return json.loads(shipped_file("head_count_comparison.json").read_text())


def test_the_comparison_has_every_head_count_and_seed(comparison):
    assert comparison["head_counts"] == [1, 2, 4, 8] and comparison["seeds"] == [0, 1, 2]
    assert sorted(comparison["validation_loss"]) == ["1", "2", "4", "8"]
    assert all(len(losses) == 3 for losses in comparison["validation_loss"].values())
    settings = (comparison["steps"], comparison["batch_size"], comparison["learning_rate"])
    assert settings == (400, 32, 3e-3)  # the capstone chapter's (book/12_tiny_gpt.ipynb)


def test_the_compared_models_have_one_parameter_count(comparison):
    config = dict(comparison["config"])
    vocab_size = config.pop("vocab_size")
    for n_heads in comparison["head_counts"]:
        model = TinyDecoder(vocab_size, n_heads=n_heads, **config)
        n_parameters = sum(parameter.numel() for parameter in model.parameters())
        assert comparison["parameters"][str(n_heads)] == n_parameters
    assert len(set(comparison["parameters"].values())) == 1


def test_every_compared_model_learned(comparison):
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocabulary.encode(text), 0.1)
    assert len(vocabulary) == comparison["config"]["vocab_size"]
    counts = torch.bincount(train_ids, minlength=len(vocabulary)).double()  # (V,)
    unigram_loss = -(counts / counts.sum()).log()[validation_ids].mean().item()
    assert math.isfinite(unigram_loss)  # every validation character occurs in training
    for losses in comparison["validation_loss"].values():
        assert all(math.isfinite(loss) and loss < unigram_loss for loss in losses)
