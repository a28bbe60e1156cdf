"""Head statistics, roles, ablation, gradient importance and pruning on hand-made cases; the
statistics over seeds; the shipped head-count comparison (data/head_count_comparison.json) and
random pruning orders (data/pruning_random_orders.json)."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import raises

from attnbook import (
    CharVocabulary,
    TinyDecoder,
    load_genesis,
    load_reference_model,
    sequential_batches,
    shipped_file,
    train_validation_split,
)
from attnbook.analysis import head_analysis as analysis
from attnbook.analysis.query_ablation import query_ablation_increase
from attnbook.models.shipped import sha256_of

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


def test_spaces_punctuation_and_capitals_are_separate_kinds_of_key():
    tokens = torch.tensor([[1, 2, 3, 0, 4, 5]])  # a . A \n b ( : spaces, punctuation, a capital
    characters = ["\n", "a", ".", "A", "b", "("]
    weights = one_hot_weights([0, 0, 1, 2, 3, 4])  # query i -> key i - 1
    statistics = analysis.head_statistics(weights, tokens, characters)
    # queries 1..5 look at a, ., A, \n, b
    assert statistics["space"].item() == pytest.approx(1 / 5)
    assert statistics["punctuation"].item() == pytest.approx(1 / 5)
    assert statistics["capital"].item() == pytest.approx(1 / 5)


def test_the_offset_profile_is_the_weight_on_key_i_minus_k():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 4, 9, 9, generator=generator, dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (L, B, H, T, T)
    tokens = torch.randint(0, 5, (3, 9), generator=generator)  # (B, T)
    profile = analysis.offset_profile(weights, 8)  # (L, H, 9)
    statistics = analysis.head_statistics(weights, tokens, CHARACTERS)
    assert profile.shape == (2, 4, 9)
    for k, name in enumerate(("current", "previous", "two_back")):
        torch.testing.assert_close(profile[..., k], statistics[name])
    # an independent loop: query i's weight on key i - k, over windows and queries i >= max(k, 1)
    for k in (3, 8):
        values = [weights[:, b, :, i, i - k] for b in range(3) for i in range(max(k, 1), 9)]
        torch.testing.assert_close(profile[..., k], torch.stack(values).mean(0))
    previous_head = analysis.offset_profile(one_hot_weights([0, 0, 1, 2, 3]), 3)[0, 0]
    assert previous_head.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_the_offset_profile_refuses_what_it_cannot_average():
    weights = one_hot_weights([0, 0, 1, 2])  # (1, 1, 1, 4, 4)
    with raises("max_offset: expected an int in [0, 3], got 4"):
        analysis.offset_profile(weights, 4)
    with raises("max_offset: expected an int in [0, 3], got -1"):
        analysis.offset_profile(weights, -1)
    with raises("weights: expected causal self-attention weights (L, B, H, T, T) with T = S"):
        analysis.offset_profile(weights[..., :3], 2)
    with raises("weights: expected shape (L, B, H, T, T) (5 dims), got weights.shape"):
        analysis.offset_profile(weights[0], 2)


def test_the_positional_baseline_scores_each_window_under_the_others_weights():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 4, 9, 9, generator=generator, dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (L, B, H, T, T)
    keys = torch.rand(3, 9, generator=generator) < 0.4  # (B, T)
    found = analysis.positional_baseline(weights, keys)  # (L, H)
    assert found.shape == (2, 4)
    # an independent loop: window b, query i under the mean of the other windows' weights
    values = []
    for b in range(3):
        others = torch.stack([weights[:, c] for c in range(3) if c != b]).mean(0)
        for i in range(1, 9):
            values.append(others[:, :, i][..., keys[b]].sum(-1))  # (L, H)
    torch.testing.assert_close(found, torch.stack(values).mean(0))
    # weights that read positions only are their own baseline
    same = weights[:, :1].expand(-1, 3, -1, -1, -1)  # (L, B, H, T, T)
    share = (same * keys[None, :, None, None, :]).sum(-1)[..., 1:].mean(dim=(1, 3))
    torch.testing.assert_close(analysis.positional_baseline(same, keys), share)


def test_the_positional_baseline_refuses_one_window_and_bad_keys():
    weights = one_hot_weights([0, 0, 1, 2])  # (1, 1, 1, 4, 4)
    with raises("weights: expected causal self-attention weights (L, B, H, T, T) with T = S"):
        analysis.positional_baseline(weights, torch.ones(1, 4, dtype=torch.bool))
    two = weights.expand(-1, 2, -1, -1, -1)  # (1, 2, 1, 4, 4)
    with raises("keys: expected a bool mask (B, T) = (2, 4), got dtype torch.int64"):
        analysis.positional_baseline(two, torch.ones(2, 4, dtype=torch.long))
    with raises("keys: expected a bool mask (B, T) = (2, 4), got dtype torch.bool and shape"):
        analysis.positional_baseline(two, torch.ones(2, 3, dtype=torch.bool))


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


def test_ablation_per_window_is_each_window_s_own_loss_change(model_and_batch):
    model, inputs, targets = model_and_batch
    each = analysis.ablation_increase(model, inputs, targets, per_window=True)  # (B, L, H)
    assert each.shape == (len(inputs), 2, 2)
    gates = torch.ones(2, 2, dtype=torch.float64)
    gates[1, 0] = 0
    for window in range(len(inputs)):
        one = slice(window, window + 1)
        expected = loss_with(model, inputs[one], targets[one], gates) - loss_with(
            model, inputs[one], targets[one], torch.ones(2, 2, dtype=torch.float64)
        )
        assert each[window, 1, 0].item() == pytest.approx(expected.item(), abs=1e-12)
    # windows of one length: the mean of the windows' increases is the pooled increase
    pooled = analysis.ablation_increase(model, inputs, targets)  # (L, H)
    torch.testing.assert_close(each.mean(dim=0), pooled, rtol=0, atol=1e-12)
    with raises("per_window: expected True or False, got 1"):
        analysis.ablation_increase(model, inputs, targets, per_window=1)


def test_query_ablation_is_each_query_s_own_loss_change(model_and_batch):
    model, inputs, targets = model_and_batch
    each = query_ablation_increase(model, inputs, targets)  # (B, T, L, H)
    assert each.shape == (*inputs.shape, 2, 2)
    ones = torch.ones(2, 2, dtype=torch.float64)

    def query_losses(gates):  # (B, T)
        logits = model(inputs, head_mask=gates)  # (B, T, V)
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")

    for layer, head in [(0, 1), (1, 0)]:
        gates = ones.clone()
        gates[layer, head] = 0
        expected = query_losses(gates) - query_losses(ones)  # (B, T)
        torch.testing.assert_close(each[..., layer, head], expected, rtol=0, atol=1e-12)
    # the queries' mean in each window is that window's increase
    windows = analysis.ablation_increase(model, inputs, targets, per_window=True)
    torch.testing.assert_close(each.mean(dim=1), windows, rtol=0, atol=1e-12)
    with raises("targets: expected shape (B, T) = (3, 6) as inputs"):
        query_ablation_increase(model, inputs, targets[:2])


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


def test_gate_gradients_average_to_the_gradient_of_the_mean_loss(model_and_batch):
    model, inputs, targets = model_and_batch
    per_window = analysis.gate_gradients(model, inputs, targets)  # (B, L, H)
    assert per_window.shape == (3, 2, 2)
    gates = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    x, y = inputs[1:2], targets[1:2]
    (second,) = torch.autograd.grad(loss_with(model, x, y, gates), gates)
    torch.testing.assert_close(per_window[1], second)
    # every window has the same length, so the batch's mean loss is the windows' mean
    (expected,) = torch.autograd.grad(loss_with(model, inputs, targets, gates), gates)
    torch.testing.assert_close(per_window.mean(dim=0), expected)
    importance = analysis.gradient_importance(model, inputs, targets)  # (L, H)
    torch.testing.assert_close(importance, per_window.abs().mean(dim=0))
    assert (importance > per_window.mean(dim=0).abs() + 1e-6).any()  # signs differ somewhere


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


def test_pruning_and_ablation_reuse_layers_without_changing_a_loss():
    # three layers and an order that goes up and down them: every point of the curve, computed
    # layer by layer from the lowest changed layer, equals a full forward with the same gates
    torch.manual_seed(0)
    model = TinyDecoder(5, d_model=8, n_heads=2, n_layers=3, max_len=6).double().eval()
    tokens = torch.randint(0, 5, (2, 7), generator=torch.Generator().manual_seed(2))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    order = [(2, 1), (0, 0), (1, 1), (2, 0), (0, 1), (1, 0)]
    curve = analysis.pruning_curve(model, inputs, targets, order)
    gates = torch.ones(3, 2, dtype=torch.float64)
    expected = [loss_with(model, inputs, targets, gates).item()]
    for layer, head in order:
        gates[layer, head] = 0
        expected.append(loss_with(model, inputs, targets, gates).item())
    assert curve == pytest.approx(expected, abs=1e-12)
    each = analysis.pruning_curve(model, inputs, targets, order, per_window=True)
    assert each.shape == (len(order) + 1, 2)  # (steps, B): one loss per window
    torch.testing.assert_close(each.mean(dim=1).tolist(), curve, rtol=0, atol=1e-12)
    gates = torch.ones(3, 2, dtype=torch.float64)
    gates[order[0]] = 0
    first = F.cross_entropy(
        model(inputs, head_mask=gates).transpose(1, 2), targets, reduction="none"
    )
    torch.testing.assert_close(each[1], first.mean(dim=1), rtol=0, atol=1e-12)
    with raises("per_window: expected True or False, got 'yes'"):
        analysis.pruning_curve(model, inputs, targets, order, per_window="yes")
    increase = analysis.ablation_increase(model, inputs, targets)  # (L, H)
    for layer, head in order:
        gates = torch.ones(3, 2, dtype=torch.float64)
        gates[layer, head] = 0
        change = loss_with(model, inputs, targets, gates).item() - expected[0]
        assert increase[layer, head].item() == pytest.approx(change, abs=1e-12)


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


def induction_targets_by_loops(tokens):
    """The docstring's definition, one pair at a time: tokens[j - 1] == tokens[i], 1 <= j < i."""
    batch, length = tokens.shape
    targets = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        for i in range(length):
            for j in range(1, i):
                targets[b, i, j] = bool(tokens[b, j - 1] == tokens[b, i])
    return targets


def test_induction_targets_follow_the_docstring_and_leave_out_the_query_itself():
    doubled = torch.tensor([[1, 1, 2, 1]])  # a a b a: the second "a" follows an "a" at once
    targets = analysis.induction_targets(doubled)[0]
    assert not targets[1].any()  # key 1 (itself) is not an induction target of query 1
    assert targets[3].nonzero().flatten().tolist() == [1, 2]  # after each earlier "a"
    tokens = torch.randint(0, 3, (4, 12), generator=torch.Generator().manual_seed(0))
    assert torch.equal(analysis.induction_targets(tokens), induction_targets_by_loops(tokens))
    assert "1 <= j < i" in analysis.induction_targets.__doc__


def test_statistics_read_uint8_tokens_as_ids_not_as_a_mask():
    weights = one_hot_weights([0, 0, 1, 2, 3, 4])
    tokens = torch.tensor([[1, 2, 3, 1, 2, 3]])
    expected = analysis.head_statistics(weights, tokens, CHARACTERS)
    narrow = analysis.head_statistics(weights, tokens.to(torch.uint8), CHARACTERS)
    assert all(torch.equal(narrow[key], expected[key]) for key in expected)


def test_statistics_refuse_tokens_that_do_not_fit_the_weights():
    weights = one_hot_weights([0, 0, 1, 2])  # (L, B, H, T, T) = (1, 1, 1, 4, 4)
    tokens = torch.tensor([[1, 2, 3, 1]])
    with raises(
        "tokens: expected shape (B, T) = (1, 4) as in weights (L, B, H, T, T) = "
        "(1, 1, 1, 4, 4), got tokens.shape = (1, 5)"
    ):
        analysis.head_statistics(weights, torch.tensor([[1, 2, 3, 1, 2]]), CHARACTERS)
    with raises("tokens: expected shape (B, T) = (1, 4)"):
        analysis.head_statistics(weights, tokens.expand(2, 4), CHARACTERS)
    with raises("tokens: expected ids in [0, len(characters) = 5), got values from 1 to 5"):
        analysis.head_statistics(weights, torch.tensor([[1, 2, 5, 1]]), CHARACTERS)
    with raises("tokens: expected integer token ids, got dtype torch.float32"):
        analysis.head_statistics(weights, tokens.float(), CHARACTERS)
    with raises("weights: expected causal self-attention weights (L, B, H, T, T) with as many"):
        analysis.head_statistics(weights[..., :3], tokens, CHARACTERS)
    with raises("characters: expected the vocabulary as a list of strings"):
        analysis.head_statistics(weights, tokens, None)


def test_windows_and_targets_are_checked_before_any_loss(model_and_batch):
    model, inputs, targets = model_and_batch
    for function in (
        analysis.gradient_importance,
        analysis.gate_gradients,
        analysis.ablation_increase,
        lambda m, x, y: analysis.pruning_curve(m, x, y, []),
        lambda m, x, y: analysis.masked_loss(m, x, y, torch.ones(2, 2, dtype=torch.float64)),
    ):
        with raises(
            "inputs: expected at least one window of at least one token (B, T >= 1), got "
            "inputs.shape = (0, 6)"
        ):
            function(model, inputs[:0], targets[:0])
        with raises(
            "targets: expected shape (B, T) = (3, 6) as inputs (one target per input "
            "token), got targets.shape = (2, 6)"
        ):
            function(model, inputs, targets[:2])
        with raises("targets: expected shape (B, T) = (3, 6)"):
            function(model, inputs, targets[:, :-1])
        with raises("targets: expected integer token ids, got dtype torch.float32"):
            function(model, inputs, targets.float())
        with raises("inputs: expected at least one window of at least one token"):
            function(model, inputs[:, :0], targets[:, :0])
        with raises("targets: expected ids in [0, vocab_size = 5), got values from -100 to"):
            function(model, inputs, targets.masked_fill(targets == 0, -100))
        with raises("targets: expected ids in [0, vocab_size = 5), got values from 0 to 7"):
            function(model, inputs, targets.masked_fill(targets == 1, 7))


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ([(0, -1)], "order[0] head: expected an int in [0, 1], got -1"),
        ([(0, 0), (-1, 1)], "order[1] layer: expected an int in [0, 1], got -1"),
        ([(2, 0)], "order[0] layer: expected an int in [0, 1], got 2"),
        ([(0, 2)], "order[0] head: expected an int in [0, 1], got 2"),
        ([(0, 1), (0, 1)], "order[1]: head (0, 1) is already removed earlier in the order"),
        ([(0,)], "order[0]: expected a (layer, head) pair, got (0,)"),
        ([(0.0, 1)], "order[0] layer: expected an int in [0, 1], got 0.0"),
        ("01", "order: expected a list of (layer, head) pairs, got str"),
    ],
)
def test_a_pruning_order_outside_the_table_of_heads_is_refused(model_and_batch, order, message):
    model, inputs, targets = model_and_batch
    with raises(message):
        analysis.pruning_curve(model, inputs, targets, order)


def test_statistics_refuse_weights_that_are_not_attention_weights():
    tokens = torch.tensor([[1, 2, 3]])
    for bad in (float("nan"), float("inf"), -0.5):
        weights = one_hot_weights([0, 0, 1])
        weights[0, 0, 0, 2, 2] = bad
        with raises("weights: expected finite, non-negative attention weights"):
            analysis.head_statistics(weights, tokens, CHARACTERS)
    with raises(
        "weights: expected at least one window and one position, got weights.shape = "
        "(1, 0, 1, 3, 3)"
    ):
        analysis.head_statistics(torch.ones(1, 0, 1, 3, 3), tokens[:0], CHARACTERS)


def test_roles_orders_and_spreads_refuse_what_they_cannot_rank():
    statistics = {key: torch.full((1, 1), 0.6) for key in analysis.ROLES}
    for threshold in (0, -0.5, 1.5, float("nan"), "0.5"):
        with raises(f"threshold: expected a share in (0, 1], got {threshold!r}"):
            analysis.name_roles(statistics, threshold)
    with raises("statistics: expected head_statistics' dict with the keys"):
        analysis.name_roles({"previous": torch.ones(1, 1)})
    with raises("scores: expected shape (L, H) (2 dims), got scores.shape = (2,)"):
        analysis.order_by(torch.tensor([1.0, 2.0]))
    with raises("scores: expected finite scores to order the heads by, got NaN or inf"):
        analysis.order_by(torch.tensor([[float("nan"), 2.0]]))
    with raises("losses: expected a dict configuration -> per-seed losses, got list"):
        analysis.seed_spread([1.0, 2.0])
    for values in ([float("nan"), 1.0], ["1.0", "2.0"], [True, False], 1.5):
        with raises(f"losses: configuration 1 needs a list of finite numbers, got {values!r}"):
            analysis.seed_spread({1: values})
    losses = {1: [1.0, 1.1, 1.2], 2: [1.5, 1.6, 1.7]}
    assert analysis.supported_orderings(losses, 0) == {(1, 2)}
    for k in (-1.0, float("nan"), float("inf"), None):
        with raises(f"n_standard_errors: expected a finite number >= 0, got {k!r}"):
            analysis.supported_orderings(losses, k)


def uniform_over_last(keys, length):
    """(1, 1, 1, T, T) causal weights: query i spreads evenly over keys max(0, i - keys + 1)..i."""
    weights = torch.ones(length, length).tril().triu(diagonal=-(keys - 1))  # (T, T)
    return (weights / weights.sum(-1, keepdim=True))[None, None, None]


def test_two_back_is_the_weight_on_key_i_minus_2():
    weights = one_hot_weights([0, 0, 0, 1, 2, 3])  # query i >= 2 -> key i - 2
    tokens = torch.tensor([[1, 2, 3, 1, 2, 3]])
    statistics = analysis.head_statistics(weights, tokens, CHARACTERS)
    assert statistics["two_back"].item() == 1.0  # queries 2 .. 5
    assert statistics["previous"].item() == pytest.approx(1 / 5)  # only query 1 looks at i - 1


def test_a_merely_local_head_does_not_stand_out_on_the_previous_character():
    tokens = torch.tensor([[1, 2, 3, 4] * 10])  # (1, 40)
    characters = list(" abcd")
    local = analysis.head_statistics(uniform_over_last(4, 40), tokens, characters)
    uniform = analysis.head_statistics(uniform_over_last(40, 40), tokens, characters)
    chance = analysis.chance_levels(local, uniform)
    # far above the whole-window chance, yet no more than its own weight on key i - 2
    assert local["previous"].item() > 2 * uniform["previous"].item()
    assert not analysis.stands_out(local["previous"], chance["previous"]).any()
    previous = analysis.head_statistics(one_hot_weights([0, *range(39)]), tokens, characters)
    chance = analysis.chance_levels(previous, uniform)
    # a true previous-token head has nothing on key i - 2: it stands out however small that is
    assert chance["previous"].item() == 0.0
    assert analysis.stands_out(previous["previous"], chance["previous"]).all()
    assert not analysis.stands_out(torch.zeros(1, 1), torch.zeros(1, 1)).any()
    assert chance["space"].item() == uniform["space"].item()
    share = torch.tensor([[0.2, 0.19]])
    assert analysis.stands_out(share, torch.tensor(0.1)).tolist() == [[True, False]]
    assert analysis.stands_out(share, torch.tensor([[0.05, 0.05]]), ratio=4).tolist() == [
        [True, False]
    ]


def test_current_is_judged_against_the_previous_key_so_a_fade_is_no_role():
    # every query gives 0.5, 0.3 and 0.2 to keys i, i - 1, i - 2: a smooth fade from offset 0
    length = 40
    weights = torch.zeros(length, length)
    for i in range(length):
        for k, share in enumerate((0.5, 0.3, 0.2)):
            weights[i, max(i - k, 0)] += share
    tokens = torch.tensor([[1, 2, 3, 4] * 10])  # (1, 40)
    characters = list(" abcd")
    fade = analysis.head_statistics(weights[None, None, None], tokens, characters)
    uniform = analysis.head_statistics(uniform_over_last(40, 40), tokens, characters)
    chance = analysis.chance_levels(fade, uniform)
    # 0.5 is 2.5 times the share two back, but only 1.7 times the previous key's 0.3
    assert fade["current"].item() > 2 * fade["two_back"].item()
    assert chance["current"].item() == pytest.approx(0.3, abs=0.01)  # query 1 gives key 0 0.5
    assert not analysis.stands_out(fade["current"], chance["current"]).any()
    diagonal = analysis.head_statistics(torch.eye(length)[None, None, None], tokens, characters)
    chance = analysis.chance_levels(diagonal, uniform)
    assert chance["current"].item() == 0.0
    assert analysis.stands_out(diagonal["current"], chance["current"]).all()


def test_the_standing_out_rule_refuses_what_it_cannot_judge():
    share = torch.tensor([[0.2, 0.3]])
    with raises("ratio: expected a finite number > 1, got 1"):
        analysis.stands_out(share, torch.tensor(0.1), ratio=1)
    with raises("chance: expected finite chance levels >= 0"):
        analysis.stands_out(share, torch.tensor(-0.1))
    with raises("chance: expected a shape broadcastable to share.shape = (1, 2)"):
        analysis.stands_out(share, torch.ones(3))
    with raises("share: expected a tensor of shape (L, H)"):
        analysis.stands_out([0.2], torch.tensor(0.1))
    with raises("baseline: expected head_statistics' dict with the keys"):
        analysis.chance_levels({key: share for key in (*analysis.ROLES, "two_back")}, {})


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_position_only_scores_are_layer_0s_scores_when_every_token_embeds_alike(n_kv_heads):
    torch.manual_seed(0)
    model = TinyDecoder(7, d_model=16, n_heads=4, n_layers=2, max_len=9, n_kv_heads=n_kv_heads)
    with torch.no_grad():  # every token the same vector: only the positions differ
        model.token_embedding.weight.copy_(torch.randn(16).expand(7, 16))
    scores = analysis.position_only_scores(model)  # (H, T, T)
    assert scores.shape == (4, 9, 9) and scores.triu(diagonal=1).isinf().sum() == 4 * 36
    tokens = torch.randint(7, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        weights = model.attention_weights(tokens)[0]  # (B, H, T, T): layer 0
    for window in weights:
        torch.testing.assert_close(scores.softmax(dim=-1), window)


def test_position_only_scores_differ_from_real_text_when_tokens_differ():
    torch.manual_seed(0)
    model = TinyDecoder(7, d_model=16, n_heads=4, n_layers=1, max_len=9)
    tokens = torch.arange(7).repeat(2)[None, :9]  # (1, 9)
    with torch.no_grad():
        weights = model.attention_weights(tokens)[0, 0]  # (H, T, T)
    assert (analysis.position_only_scores(model).softmax(-1) - weights).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"positions": "rope"},
            "model: expected learned position embeddings, got positions = 'rope'",
        ),
        ({"positions": "sinusoidal"}, "got positions = 'sinusoidal'"),
    ],
)
def test_position_only_scores_need_learned_positions(options, message):
    model = TinyDecoder(7, d_model=16, n_heads=4, n_layers=1, max_len=9, **options)
    with raises(message):
        analysis.position_only_scores(model)


def test_position_only_scores_refuse_a_layer_that_is_not_plain_attention():
    model = TinyDecoder(7, d_model=16, n_heads=4, n_layers=1, max_len=9)
    model.blocks[0].attention.window = 4  # a sliding window: the scores alone would mislead
    with raises("model: expected plain softmax attention in layer 0"):
        analysis.position_only_scores(model)


def test_student_t_quantile_matches_closed_forms_and_a_table():
    # 1 degree of freedom is Cauchy: t = tan(pi (p - 1/2)); 2 have a closed form
    for p in (0.6, 0.9, 0.975, 0.999):
        assert analysis.student_t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)))
        closed = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
        assert analysis.student_t_quantile(p, 2) == pytest.approx(closed, rel=1e-8)
    # two-sided 95% values of any t table, to their 4 printed decimals
    for df, table in ((7, 2.3646), (11, 2.2010), (31, 2.0395), (120, 1.9799)):
        assert analysis.student_t_quantile(0.975, df) == pytest.approx(table, abs=5e-5)
    assert analysis.student_t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-8)
    assert analysis.student_t_quantile(0.025, 7) == -analysis.student_t_quantile(0.975, 7)


@pytest.mark.parametrize(
    ("p", "df", "message"),
    [
        (1.0, 7, "p: expected a probability"),
        (0.0, 7, "p: expected"),
        (True, 7, "p: expected"),
        (0.9, 0, "df: expected a positive int"),
        (0.9, 2.5, "df: expected"),
    ],
)
def test_student_t_quantile_rejects_bad_arguments(p, df, message):
    with raises(message):
        analysis.student_t_quantile(p, df)


def test_the_shipped_random_pruning_orders_are_pruning_curves_of_the_reference_model():
    """data/pruning_random_orders.json: seeds 0 to 107, 33 points each, every curve from the
    same loss with every head to the same with none; seed 5's curve recomputed on the
    chapter's 12 held-out windows; data/README.md records the file's sha256."""
    data = shipped_file("pruning_random_orders.json").read_bytes()
    record = json.loads(data)
    assert record["seeds"] == list(range(108))
    assert record["windows"] == {"validation_fraction": 0.1, "first": 8, "count": 12}
    curves = torch.tensor(record["curves"], dtype=torch.float64)  # (108, 33)
    assert curves.shape == (108, 33)
    assert (curves[:, 0] == curves[0, 0]).all() and (curves[:, -1] == curves[0, -1]).all()
    reference = load_reference_model("cpu")
    ids = reference.vocabulary.encode(load_genesis())
    _, validation_ids = train_validation_split(ids, 0.1)
    windows, targets = sequential_batches(
        validation_ids, reference.manifest["config"]["max_len"], 20
    )
    permutation = torch.randperm(32, generator=torch.Generator().manual_seed(5))
    order = [divmod(i, 8) for i in permutation.tolist()]
    live = analysis.pruning_curve(reference.model, windows[8:], targets[8:], order)
    assert torch.allclose(torch.tensor(live, dtype=torch.float64), curves[5], atol=1e-4)
    assert sha256_of(data) in shipped_file("README.md").read_text()
