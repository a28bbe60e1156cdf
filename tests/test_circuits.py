"""Head scores against float64 loops and their errors, chapter 14's experiment, and the
attention-only TinyDecoder."""

import itertools

import pytest
import torch

from attnbook import (
    TinyDecoder,
    causal_mask,
    induction_score,
    previous_token_score,
    sink_score,
)
from attnbook.analysis import circuits
from attnbook.models.periodic import BOS, VOCAB_SIZE, periodic_batch


def causal_weights(*shape, seed=0):
    """Random causal attention weights of shape (*lead, T, T), float64."""
    *lead, length, _ = shape
    scores = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return scores.masked_fill(~causal_mask(length), float("-inf")).softmax(dim=-1)


def loop_score(weights, key_of, first_query):
    """Per leading index: the mean over t >= first_query(index) of weights[t, key_of(t, index)]."""
    lead, length = weights.shape[:-2], weights.shape[-1]
    result = torch.empty(lead, dtype=torch.float64)
    for index in itertools.product(*(range(n) for n in lead)):
        queries = range(first_query(index), length)
        total = sum(weights[index][t, key_of(t, index)].item() for t in queries)
        result[index] = total / len(queries)
    return result


def test_previous_token_score_matches_a_loop():
    weights = causal_weights(3, 4, 7, 7)
    expected = loop_score(weights, lambda t, index: t - 1, lambda index: 1)
    result = previous_token_score(weights)
    assert result.shape == (3, 4)
    torch.testing.assert_close(result, expected, rtol=0, atol=1e-12)


def test_sink_score_matches_a_loop():
    weights = causal_weights(2, 3, 6, 6, seed=1)
    expected = loop_score(weights, lambda t, index: 0, lambda index: 1)
    torch.testing.assert_close(sink_score(weights), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("period", [1, 2, 5, 8])
def test_induction_score_with_one_period_matches_a_loop(period):
    weights = causal_weights(2, 3, 9, 9, seed=2)
    expected = loop_score(weights, lambda t, index: t - period + 1, lambda index: period)
    torch.testing.assert_close(induction_score(weights, period), expected, rtol=0, atol=1e-12)


def test_induction_score_with_one_period_per_sequence_matches_a_loop():
    weights = causal_weights(3, 2, 10, 10, seed=3)  # (B, H, T, T)
    periods = torch.tensor([[2], [5], [9]])  # (B, 1)
    expected = loop_score(
        weights,
        lambda t, index: t - periods[index[0], 0].item() + 1,
        lambda index: periods[index[0], 0].item(),
    )
    torch.testing.assert_close(induction_score(weights, periods), expected, rtol=0, atol=1e-12)


def test_scores_of_ideal_heads_and_of_a_uniform_head():
    length, period = 9, 4
    previous = torch.zeros(length, length).diagonal_scatter(torch.ones(length - 1), -1)
    previous[0, 0] = 1.0
    assert previous_token_score(previous).item() == 1.0
    assert sink_score(previous).item() == pytest.approx(1 / (length - 1))
    uniform = causal_mask(length).double()
    uniform = uniform / uniform.sum(-1, keepdim=True)  # query t gives each key 1 / (t + 1)
    chance = sum(1 / (t + 1) for t in range(1, length)) / (length - 1)
    assert previous_token_score(uniform).item() == pytest.approx(chance)
    assert sink_score(uniform).item() == pytest.approx(chance)
    induction_chance = sum(1 / (t + 1) for t in range(period, length)) / (length - period)
    assert induction_score(uniform, period).item() == pytest.approx(induction_chance)


def test_scores_keep_float32_and_accept_two_dims():
    weights = causal_weights(5, 5).float()
    for score in (previous_token_score(weights), sink_score(weights), induction_score(weights, 2)):
        assert score.shape == () and score.dtype == torch.float32


@pytest.mark.parametrize("score", [previous_token_score, sink_score])
def test_weight_errors(score):
    with pytest.raises(ValueError, match=r"weights: expected a tensor of shape \(\.\.\., T, T\)"):
        score([[1.0]])
    with pytest.raises(ValueError, match=r"at least 2 dims, got weights.shape = \(4,\)"):
        score(torch.ones(4))
    with pytest.raises(ValueError, match=r"square causal self-attention weights .* \(2, 4, 5\)"):
        score(torch.ones(2, 4, 5))
    with pytest.raises(ValueError, match=r"T >= 2 .* got weights.shape = \(3, 1, 1\)"):
        score(torch.ones(3, 1, 1))
    with pytest.raises(ValueError, match=r"floating-point tensor .* got dtype torch.int64"):
        score(torch.ones(4, 4, dtype=torch.long))


def test_induction_score_weight_errors():
    with pytest.raises(ValueError, match=r"square causal self-attention weights"):
        induction_score(torch.ones(4, 5), 2)
    with pytest.raises(ValueError, match=r"T >= 2"):
        induction_score(torch.ones(1, 1), 1)


@pytest.mark.parametrize(
    ("period", "message"),
    [
        (0, r"values in \[1, 5\], got values from 0 to 0"),
        (6, r"values in \[1, 5\], got values from 6 to 6"),
        (torch.tensor([[1], [7]]), r"got values from 1 to 7"),
        (True, r"got bool"),
        (2.0, r"got float"),
        ("2", r"got str"),
        (torch.tensor([2.0]), r"got dtype torch.float32"),
        (torch.tensor([True]), r"got dtype torch.bool"),
        (torch.tensor([2, 3]), r"broadcastable to \(2, 3\) .* got period.shape = \(2,\)"),
    ],
)
def test_period_errors(period, message):
    weights = causal_weights(2, 3, 6, 6)
    with pytest.raises(ValueError, match=rf"period: expected .*{message}"):
        induction_score(weights, period)


def small_decoder(attention_only):
    torch.manual_seed(0)
    return TinyDecoder(
        11, d_model=8, n_heads=2, n_layers=2, max_len=6, attention_only=attention_only
    ).eval()


def test_attention_only_decoder_has_no_mlp_and_adds_attention_to_the_stream():
    plain, bare = small_decoder(False), small_decoder(True)
    assert all(block.mlp is None and block.mlp_norm is None for block in bare.blocks)
    mlp_parameters = sum(
        p.numel()
        for block in plain.blocks
        for p in [*block.mlp.parameters(), *block.mlp_norm.parameters()]
    )
    assert sum(p.numel() for p in plain.parameters()) - mlp_parameters == sum(
        p.numel() for p in bare.parameters()
    )
    block = bare.blocks[0]
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))  # (B, T, D)
    attended, _ = block.attention(block.attention_norm(x), is_causal=True)  # (B, T, D)
    torch.testing.assert_close(block(x), x + attended)
    tokens = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(2))
    assert bare(tokens).shape == (2, 6, 11)
    assert bare.attention_weights(tokens).shape == (2, 2, 2, 6, 6)


def test_attention_only_must_be_a_bool():
    with pytest.raises(ValueError, match=r"attention_only: expected True or False, got 1"):
        TinyDecoder(11, d_model=8, n_heads=2, n_layers=1, max_len=6, attention_only=1)


def test_periodic_batch_repeats_its_block_after_a_first_token():
    periods = torch.tensor([4, 7, 32])
    tokens = periodic_batch(periods, torch.Generator().manual_seed(0))
    assert tokens.shape == (3, 33) and (tokens[:, 0] == BOS).all()
    for row, period in zip(tokens, periods.tolist(), strict=True):
        body = row[1:]
        assert torch.equal(body[period:], body[:-period]) if period < 32 else True
        assert body.max() < VOCAB_SIZE
    no_bos = periodic_batch(periods, torch.Generator().manual_seed(0), bos=False)
    assert (no_bos[:, 0] < VOCAB_SIZE).all()


@pytest.mark.parametrize("periods", [torch.tensor([0, 4]), torch.tensor([33])])
def test_periodic_batch_refuses_periods_outside_1_to_32(periods):
    with pytest.raises(ValueError, match=r"periods: expected values in \[1, 32\]"):
        periodic_batch(periods, torch.Generator())


def test_periodic_batch_wants_one_period_per_sequence():
    with pytest.raises(ValueError, match=r"periods: expected shape \(B,\)"):
        periodic_batch(torch.tensor([[4]]), torch.Generator())


@pytest.mark.parametrize(
    "periods", [torch.tensor([4.0, 7.0]), torch.tensor([True, True]), torch.tensor([4 + 0j])]
)
def test_periodic_batch_wants_integer_periods(periods):
    with pytest.raises(ValueError, match=r"periods: expected an integer tensor, got dtype torch\."):
        periodic_batch(periods, torch.Generator())


def test_periodic_batch_takes_any_integer_dtype():
    generator = torch.Generator().manual_seed(0)
    as_int64 = periodic_batch(torch.tensor([4, 7]), generator)
    generator.manual_seed(0)
    as_uint8 = periodic_batch(torch.tensor([4, 7], dtype=torch.uint8), generator)
    assert torch.equal(as_int64, as_uint8)


def test_gated_forward_matches_the_model_and_its_weights():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.tensor([5, 9]), torch.Generator().manual_seed(1))
    logits, weights = circuits.gated_forward(model, tokens)
    torch.testing.assert_close(logits, model(tokens))
    torch.testing.assert_close(weights, model.attention_weights(tokens))
    gates = torch.ones(2, 4)
    gates[0, 1] = 0.0
    gated_logits, _ = circuits.gated_forward(model, tokens, gates)
    torch.testing.assert_close(gated_logits, model(tokens, head_mask=gates))
    with pytest.raises(ValueError, match=r"head_mask: expected shape \(L, H\) = \(2, 4\)"):
        circuits.gated_forward(model, tokens, torch.ones(4))


def test_circuit_measurements_use_the_library_scores_on_the_weights_they_name():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((3,), 16), torch.Generator().manual_seed(2))
    found = circuits.circuit_measurements(model, tokens, 16)
    logits, weights = circuits.gated_forward(model, tokens)
    body = weights[..., 1:, 1:]
    torch.testing.assert_close(found["previous"], previous_token_score(body).mean(1))
    torch.testing.assert_close(found["induction"], induction_score(body, 16).mean(1))
    torch.testing.assert_close(found["sink_first"], sink_score(weights[..., :17, :17]).mean(1))
    torch.testing.assert_close(found["sink_repeated"], weights[..., 17:, 0].mean(dim=(1, 3)))
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )
    assert found["loss_first"] == pytest.approx(losses[:, :16].mean().item())
    assert found["loss_repeated"] == pytest.approx(losses[:, 17:].mean().item())


def test_shipped_circuit_models_load_and_match_their_curves():
    models, manifest = circuits.load_circuit_models()
    assert sorted(models) == sorted(manifest["snapshots"])
    final = models[f"random/{manifest['training']['steps']}"]
    evaluation = periodic_batch(
        torch.full((manifest["evaluation"]["sequences"],), 16),
        torch.Generator().manual_seed(manifest["evaluation"]["seed"]),
    )
    found = circuits.circuit_measurements(final, evaluation, 16)
    last = {name: values[-1] for name, values in manifest["curves"]["random"].items()}
    assert found["loss_repeated"] == pytest.approx(last["loss_repeated"], abs=0.005)
    torch.testing.assert_close(
        found["induction"], torch.tensor(last["induction"]), atol=0.005, rtol=0
    )


def test_load_circuit_models_refuses_changed_weights(monkeypatch):
    from attnbook.models import shipped

    real = shipped.read_shipped

    def tampered(name, regenerate):
        data = real(name, regenerate)
        return data + b"x" if name == circuits.WEIGHTS else data

    monkeypatch.setattr(circuits, "read_shipped", tampered)
    with pytest.raises(ValueError, match=r"circuit_models.pt: sha256 .* differs"):
        circuits.load_circuit_models()


def test_composition_measurements_remove_heads_from_the_named_inputs_only():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((4,), 8), torch.Generator().manual_seed(3))
    plain = circuits.circuit_measurements(model, tokens, 8)
    nothing = circuits.composition_measurements(model, tokens, 8, [], ("key",))
    assert nothing["loss_repeated"] == pytest.approx(plain["loss_repeated"], abs=1e-5)
    torch.testing.assert_close(nothing["induction"], plain["induction"][1])
    # queries and keys without heads 0 and 2: layer 1's weights as under the gates
    gates = torch.ones(2, 4)
    gates[0, [0, 2]] = 0.0
    gated = circuits.circuit_measurements(model, tokens, 8, head_mask=gates)
    both = circuits.composition_measurements(model, tokens, 8, [0, 2], ("query", "key"))
    torch.testing.assert_close(both["induction"], gated["induction"][1])
    # the stream to the logits keeps the heads, so the loss is not the gated one
    assert abs(both["loss_repeated"] - gated["loss_repeated"]) > 1e-4
    # values do not change the weights; keys alone do
    values = circuits.composition_measurements(model, tokens, 8, [0, 2], ("value",))
    torch.testing.assert_close(values["induction"], plain["induction"][1])
    assert abs(values["loss_repeated"] - plain["loss_repeated"]) > 1e-4
    keys = circuits.composition_measurements(model, tokens, 8, [0, 2], ("key",))
    assert not torch.allclose(keys["induction"], plain["induction"][1])


def test_composition_measurements_return_the_logits_of_their_forward_pass():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((4,), 8), torch.Generator().manual_seed(3))
    with torch.no_grad():
        intact = model(tokens)  # (B, T, V)
    nothing = circuits.composition_measurements(model, tokens, 8, [], ("key",))
    torch.testing.assert_close(nothing["logits"], intact)
    keys = circuits.composition_measurements(model, tokens, 8, [0, 2], ("key",))
    losses = torch.nn.functional.cross_entropy(
        keys["logits"][:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # (B, T - 1)
    assert losses[:, 9:].mean().item() == pytest.approx(keys["loss_repeated"], abs=1e-6)


def test_composition_measurements_return_layer_1s_weights():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((4,), 8), torch.Generator().manual_seed(3))
    # (L, B, H, T, T): the intact model's weights, by its own forward pass
    intact = model.attention_weights(tokens)
    nothing = circuits.composition_measurements(model, tokens, 8, [], ("key",))
    torch.testing.assert_close(nothing["weights"], intact[1])
    keys = circuits.composition_measurements(model, tokens, 8, [0, 2], ("key",))
    assert keys["weights"].shape == intact[1].shape
    assert not torch.allclose(keys["weights"], intact[1])
    # the returned weights are the ones the induction score was read from
    scores = induction_score(keys["weights"][..., 1:, 1:], 8).mean(dim=0)
    torch.testing.assert_close(scores, keys["induction"])


def mean_ablated_by_hook(model, tokens, period, heads):
    """The repeated loss with layer 0's heads' outputs, before out_proj, replaced by their
    mean over the batch: a forward pre-hook on out_proj, independent of the library's code."""
    attention = model.blocks[0].attention
    d_head = attention.head_dim

    def replace(module, args):
        (merged,) = args  # (B, T, H * d_head)
        merged = merged.clone()
        for h in heads:
            part = slice(h * d_head, (h + 1) * d_head)
            merged[..., part] = merged[..., part].mean(dim=0)  # (T, d_head), broadcast
        return (merged,)

    handle = attention.out_proj.register_forward_pre_hook(replace)
    try:
        with torch.no_grad():
            logits = model(tokens)  # (B, T, V)
    finally:
        handle.remove()
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # (B, T - 1)
    return losses[:, period + 1 :].mean().item()


@pytest.mark.parametrize("heads", [[0], [1, 3], [0, 1, 2, 3]])
def test_mean_ablation_matches_a_hook_that_averages_the_heads_outputs(heads):
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((6,), 8), torch.Generator().manual_seed(3))
    found = circuits.mean_ablation_measurements(model, tokens, 8, heads)
    expected = mean_ablated_by_hook(model, tokens, 8, heads)
    assert found["loss_repeated"] == pytest.approx(expected, abs=1e-5)
    # neither the intact model nor zero ablation
    gates = torch.ones(2, 4)
    gates[0, heads] = 0.0
    for other in (None, gates):
        loss = circuits.circuit_measurements(model, tokens, 8, head_mask=other)["loss_repeated"]
        assert abs(found["loss_repeated"] - loss) > 1e-4


def test_mean_ablation_of_identical_sequences_changes_nothing():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    same = periodic_batch(torch.full((1,), 8), torch.Generator().manual_seed(3)).expand(3, -1)
    plain = circuits.circuit_measurements(model, same, 8)
    found = circuits.mean_ablation_measurements(model, same, 8, [0, 2])
    assert found["loss_repeated"] == pytest.approx(plain["loss_repeated"], abs=1e-5)
    torch.testing.assert_close(found["induction"], plain["induction"][1])


def test_mean_ablation_refuses_heads_outside_layer_0():
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((2,), 8), torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match=r"heads: expected layer-0 head indices .* got \[4\]"):
        circuits.mean_ablation_measurements(model, tokens, 8, [4])


@pytest.mark.parametrize(
    ("heads", "inputs", "message"),
    [
        ([0], "key", r"inputs: expected a tuple of names from .* got 'key'"),
        ([0], ("keys",), r"inputs: expected a tuple of names .* got \('keys',\)"),
        ([4], ("key",), r"heads: expected layer-0 head indices in \[0, 4\), got \[4\]"),
        ([-1], ("key",), r"heads: expected .* got \[-1\]"),
    ],
)
def test_composition_measurements_refuse_bad_arguments(heads, inputs, message):
    model = circuits.build_circuit_model().eval()
    tokens = periodic_batch(torch.full((2,), 8), torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match=message):
        circuits.composition_measurements(model, tokens, 8, heads, inputs)


def test_ov_logits_match_the_head_attending_to_one_token():
    torch.manual_seed(0)
    model = circuits.build_circuit_model().eval()
    block = model.blocks[1]
    found = circuits.ov_logits(model, 1, 2, VOCAB_SIZE)
    assert found.shape == (VOCAB_SIZE, VOCAB_SIZE + 1)
    # a one-token sequence attends to itself with weight 1; gate every other head off
    embedded = model.token_embedding.weight[:VOCAB_SIZE] + model.position_embedding.weight.mean(0)
    gates = torch.tensor([0.0, 0.0, 1.0, 0.0])
    with torch.no_grad():
        written, _ = block.attention(
            block.attention_norm(embedded)[:, None], is_causal=True, head_mask=gates
        )  # (N, 1, D)
        written = written[:, 0].double() - block.attention.out_proj.bias.double()
        centred = written - written.mean(dim=-1, keepdim=True)
        expected = (centred * model.final_norm.weight.double()) @ model.lm_head.weight.double().T
    torch.testing.assert_close(found.double(), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("layer", "head", "n_tokens", "message"),
    [
        (2, 0, 64, r"layer, head: expected a layer in \[0, 2\) .* got layer = 2, head = 0"),
        (0, 4, 64, r"layer, head: .* head in \[0, 4\), got layer = 0, head = 4"),
        (0, 0, 0, r"n_tokens: expected 1 \.\. 65, got 0"),
        (0, 0, 66, r"n_tokens: expected 1 \.\. 65, got 66"),
    ],
)
def test_ov_logits_refuse_bad_arguments(layer, head, n_tokens, message):
    model = circuits.build_circuit_model().eval()
    with pytest.raises(ValueError, match=message):
        circuits.ov_logits(model, layer, head, n_tokens)


def test_shipped_induction_heads_compose_through_keys_and_copy():
    models, manifest = circuits.load_circuit_models()
    final = models[f"random/{manifest['training']['steps']}"]
    evaluation = periodic_batch(
        torch.full((64,), 16), torch.Generator().manual_seed(manifest["evaluation"]["seed"])
    )
    keys = circuits.composition_measurements(final, evaluation, 16, [0, 2], ("key",))
    queries = circuits.composition_measurements(final, evaluation, 16, [0, 2], ("query",))
    assert keys["induction"].max() < 0.15 and queries["induction"].min() > 0.6
    for head in range(4):
        rows = circuits.ov_logits(final, 1, head, VOCAB_SIZE)[:, :VOCAB_SIZE]
        assert (rows.argmax(dim=-1) == torch.arange(VOCAB_SIZE)).float().mean() > 0.7


def reference_k_composition(model, heads, head, n_tokens):
    """Float64 einsums over per-head weight views: layer 1's QK read through layer 0's OV."""
    attention = model.blocks[1].attention
    n_heads, d_head = attention.n_heads, attention.head_dim
    as64 = {name: p.detach().double() for name, p in model.named_parameters()}
    x = as64["token_embedding.weight"][:n_tokens] + as64["position_embedding.weight"].mean(0)

    def layer_norm(values, prefix):
        normed = torch.nn.functional.layer_norm(values, values.shape[-1:])
        return normed * as64[f"{prefix}.weight"] + as64[f"{prefix}.bias"]

    w_v = as64["blocks.0.attention.v_proj.weight"].view(n_heads, d_head, -1)  # (H, d, D)
    b_v = as64["blocks.0.attention.v_proj.bias"].view(n_heads, d_head)  # (H, d)
    w_o = as64["blocks.0.attention.out_proj.weight"].view(-1, n_heads, d_head)  # (D, H, d)
    source = layer_norm(x, "blocks.0.attention_norm")  # (N, D)
    values = torch.einsum("hde,ne->nhd", w_v, source) + b_v  # (N, H, d)
    written = sum(torch.einsum("nd,ed->ne", values[:, h], w_o[:, h]) for h in heads)
    key_in = (written - written.mean(-1, keepdim=True)) * as64["blocks.1.attention_norm.weight"]
    w_q = as64["blocks.1.attention.q_proj.weight"].view(n_heads, d_head, -1)[head]
    b_q = as64["blocks.1.attention.q_proj.bias"].view(n_heads, d_head)[head]
    w_k = as64["blocks.1.attention.k_proj.weight"].view(n_heads, d_head, -1)[head]
    query = layer_norm(x, "blocks.1.attention_norm") @ w_q.T + b_q  # (N, d)
    key = key_in @ w_k.T  # (N, d)
    return query @ key.T / d_head**0.5


@pytest.mark.parametrize(("heads", "head"), [([0], 1), ([0, 2], 3), ([1, 2, 3], 0)])
def test_k_composition_scores_match_float64_einsums(heads, head):
    torch.manual_seed(1)
    model = circuits.build_circuit_model().eval()
    found = circuits.k_composition_scores(model, heads, head, 20)
    assert found.shape == (20, 20)
    expected = reference_k_composition(model, heads, head, 20)
    torch.testing.assert_close(found.double(), expected, atol=1e-5, rtol=1e-4)


def test_k_composition_scores_add_over_the_earlier_heads():
    torch.manual_seed(2)
    model = circuits.build_circuit_model().eval()
    both = circuits.k_composition_scores(model, [0, 2], 1, VOCAB_SIZE)
    parts = [circuits.k_composition_scores(model, [h], 1, VOCAB_SIZE) for h in (0, 2)]
    torch.testing.assert_close(both, parts[0] + parts[1], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(parts[0], parts[1])


def test_shipped_induction_heads_match_the_previous_token_in_their_weights():
    models, manifest = circuits.load_circuit_models()
    final = models[f"random/{manifest['training']['steps']}"]
    tokens = torch.arange(VOCAB_SIZE)
    for head in range(4):
        through_previous = circuits.k_composition_scores(final, [0, 2], head, VOCAB_SIZE)
        through_others = circuits.k_composition_scores(final, [1, 3], head, VOCAB_SIZE)
        assert (through_previous.argmax(dim=-1) == tokens).all()
        assert (through_others.argmax(dim=-1) == tokens).float().mean() < 0.3


@pytest.mark.parametrize(
    ("heads", "head", "n_tokens", "message"),
    [
        ([4], 0, 64, r"layer, head: .* head in \[0, 4\), got layer = 0, head = 4"),
        ([0], -1, 64, r"layer, head: .* got layer = 1, head = -1"),
        ([0], 0, 66, r"n_tokens: expected 1 \.\. 65, got 66"),
    ],
)
def test_k_composition_scores_refuse_bad_arguments(heads, head, n_tokens, message):
    model = circuits.build_circuit_model().eval()
    with pytest.raises(ValueError, match=message):
        circuits.k_composition_scores(model, heads, head, n_tokens)


def test_k_composition_scores_need_two_layers():
    model = TinyDecoder(
        VOCAB_SIZE + 1, d_model=16, n_heads=2, n_layers=1, max_len=8, attention_only=True
    )
    with pytest.raises(ValueError, match="model: expected at least 2 layers, got 1"):
        circuits.k_composition_scores(model, [0], 0, 8)
