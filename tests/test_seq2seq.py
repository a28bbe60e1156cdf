"""Encoder, plain and attention decoders, greedy decoding and the training loop."""

import json

import pytest
import torch
from helpers import raises

from attnbook import (
    Seq2Seq,
    encode_words,
    greedy_decode,
    load_reversal_models,
    reversal_batch,
    set_seed,
    shift_right,
    token_accuracy,
    trace_shapes,
    train_seq2seq,
)
from attnbook.models import seq2seq_training
from attnbook.models.seq2seq_training import (
    REVERSAL_CONFIG,
    REVERSAL_MANIFEST,
    REVERSAL_WEIGHTS,
    train_reversal_model,
)
from attnbook.models.tasks import BOS, EOS, PAD, VOCAB

V, E, D = len(VOCAB), 8, 12
WORDS = ["attention", "ox", "cat"]


def model(attention, seed=0):
    set_seed(seed)
    return Seq2Seq(V, E, D, attention=attention).eval()


@pytest.mark.parametrize("attention", [False, True])
def test_shapes(attention):
    source, lengths = encode_words(WORDS)  # (3, 9)
    decoder_input = torch.full((3, 5), BOS)  # (B, T)
    with trace_shapes() as trace:
        logits, weights = model(attention)(source, lengths, decoder_input)
    assert logits.shape == (3, 5, V)
    assert trace["annotations h_j"] == (3, 9, 2 * D) and trace["summary c"] == (3, 2 * D)
    assert trace["state s_t"] == (3, D) and trace["all logits"] == (3, 5, V)
    assert weights is None if not attention else weights.shape == (3, 5, 9)
    assert trace.steps.count("state s_t") == 5  # one row per decoder step


def test_attention_weights_sum_to_one_and_padding_gets_zero():
    source, lengths = encode_words(WORDS)
    _, weights = model(True)(source, lengths, torch.full((3, 4), BOS))  # (B, T, S)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3, 4))
    assert torch.equal(weights[1, :, 2:], torch.zeros(4, 7))  # "ox": 7 padding columns
    assert torch.equal(weights[2, :, 3:], torch.zeros(4, 6))  # "cat": 6 padding columns
    assert (weights[0] > 0).all()  # the longest word has no padding


@pytest.mark.parametrize("attention", [False, True])
def test_padding_does_not_change_a_words_output(attention):
    net = model(attention)
    alone, alone_lengths = encode_words(["cat"])
    padded, padded_lengths = encode_words(["cat", "attention"])
    steps = torch.full((2, 4), BOS)
    logits_alone, _ = net(alone, alone_lengths, steps[:1])
    logits_padded, _ = net(padded, padded_lengths, steps)
    torch.testing.assert_close(logits_padded[:1], logits_alone)


@pytest.mark.parametrize("attention", [False, True])
def test_greedy_decoding_is_deterministic_under_a_seed(attention):
    source, lengths = encode_words(WORDS)
    tokens, weights = greedy_decode(model(attention, seed=3), source, lengths, max_len=6)
    again, again_weights = greedy_decode(model(attention, seed=3), source, lengths, max_len=6)
    other, _ = greedy_decode(model(attention, seed=4), source, lengths, max_len=6)
    assert tokens.shape == (3, 6) and torch.equal(tokens, again)
    assert not torch.equal(tokens, other)
    assert (weights is None) == (not attention)
    if attention:
        assert weights.shape == (3, 6, 9) and torch.equal(weights, again_weights)


def test_greedy_decoding_pads_after_eos():
    net = model(False)
    with torch.no_grad():
        net.decoder.out.bias.fill_(-1e4)
        net.decoder.out.bias[EOS] = 1e4  # every step predicts EOS
    tokens, _ = greedy_decode(net, *encode_words(WORDS), max_len=4)
    assert tokens[:, 0].tolist() == [EOS] * 3 and (tokens[:, 1:] == PAD).all()


def test_shift_right_starts_with_bos():
    target = torch.tensor([[5, 6, EOS], [7, EOS, PAD]])
    assert shift_right(target).tolist() == [[BOS, 5, 6], [BOS, 7, EOS]]


def test_training_learns_to_reverse_short_words():
    set_seed(0)
    net = Seq2Seq(V, 8, 16, attention=True)
    generator = torch.Generator().manual_seed(0)
    losses = train_seq2seq(net, lambda: reversal_batch(32, 2, 4, generator=generator), 100, lr=3e-2)
    test = reversal_batch(100, 2, 4, generator=torch.Generator().manual_seed(1))
    assert losses[0] > 3.0 and sum(losses[-10:]) / 10 < 0.5
    assert token_accuracy(net, test) > 0.95
    assert not net.training


def test_source_must_be_token_ids():
    with raises("source: expected token ids of dtype torch.long, got torch.float32"):
        model(False).encoder(torch.zeros(2, 3), torch.tensor([3, 2]))


def test_source_must_be_2d():
    with raises("source: expected shape (B, S) (2 dims), got source.shape = (3,)"):
        model(False).encoder(torch.zeros(3, dtype=torch.long), torch.tensor([3]))


def test_lengths_must_match_the_batch():
    with raises("source_lengths: expected shape (B,) with B = 2 as in source, got "):
        model(False).encoder(torch.zeros(2, 3, dtype=torch.long), torch.tensor([3, 2, 1]))


def test_lengths_must_fit_the_source():
    with raises("source_lengths: expected every length in [1, S = 3], got [4, 0]"):
        model(False).encoder(torch.zeros(2, 3, dtype=torch.long), torch.tensor([4, 0]))


def test_decoder_input_batch_must_match():
    net = model(True)
    memory = net.encoder(*encode_words(WORDS))
    with raises("decoder_input: expected shape (B, T) with B = 3 as in the encoder output"):
        net.decoder(torch.full((2, 4), BOS), memory)


def test_model_sizes_must_be_positive():
    with raises("hidden_dim: expected a positive int, got 0"):
        Seq2Seq(V, E, 0, attention=True)


def test_greedy_max_len_must_be_positive():
    with raises("max_len: expected a positive int, got 0"):
        greedy_decode(model(True), *encode_words(WORDS), max_len=0)


def test_train_steps_must_be_positive():
    with raises("steps: expected a positive int, got 0"):
        train_seq2seq(model(True), lambda: None, 0)


# Chapter 1's shipped models and the partial run that checks them.


def test_stop_after_runs_a_prefix_of_the_full_schedule():
    def run(stop_after):
        net = model(attention=True)
        generator = torch.Generator().manual_seed(0)
        next_batch = lambda: reversal_batch(8, 2, 4, generator=generator)  # noqa: E731
        return net, train_seq2seq(net, next_batch, 6, stop_after=stop_after)

    full_net, full = run(None)
    part_net, part = run(3)
    assert len(full) == 6 and part == full[:3]
    assert not part_net.training
    assert not torch.equal(full_net.decoder.out.weight, part_net.decoder.out.weight)


@pytest.mark.parametrize("stop_after", [0, 7, 2.5, True])
def test_stop_after_must_lie_within_the_schedule(stop_after):
    with raises("stop_after: expected an int in [1, 6]"):
        train_seq2seq(model(True), lambda: None, 6, stop_after=stop_after)


def test_the_shipped_reversal_models_load_and_match_their_manifest():
    shipped = load_reversal_models()
    assert set(shipped.models) == {"plain", "attention"}
    assert shipped.manifest["config"] == REVERSAL_CONFIG
    for name, history in shipped.losses.items():
        assert len(history) == REVERSAL_CONFIG["steps"] and history[0] > 3.0
        assert not shipped.models[name].training
    assert sum(shipped.losses["attention"][-20:]) / 20 < 0.3
    test = reversal_batch(50, 5, 5, generator=torch.Generator().manual_seed(1))
    assert token_accuracy(shipped.models["attention"], test) > 0.95


def test_a_short_live_run_repeats_the_shipped_losses():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the script trained
    try:
        _, losses = train_reversal_model(attention=False, stop_after=3)
    finally:
        torch.set_num_threads(threads)
    shipped = load_reversal_models().losses["plain"][:3]
    assert max(abs(a - b) for a, b in zip(losses, shipped, strict=True)) < 1e-4


def _shipped_with(monkeypatch, name, data):
    real = seq2seq_training.read_shipped
    fake = lambda file, regenerate: data if file == name else real(file, regenerate)  # noqa: E731
    monkeypatch.setattr(seq2seq_training, "read_shipped", fake)


def test_changed_weights_are_refused(monkeypatch):
    weights = seq2seq_training.read_shipped(REVERSAL_WEIGHTS, "")
    _shipped_with(monkeypatch, REVERSAL_WEIGHTS, weights[:-1] + bytes([weights[-1] ^ 1]))
    with raises("differs from the manifest's"):
        load_reversal_models()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"config": {', "is not a complete manifest (JSONDecodeError"),
        (b'{"config": {}, "sha256": "0"}', "is not a complete manifest (KeyError"),
        (b"[]", "is not a complete manifest (TypeError"),
    ],
)
def test_a_broken_manifest_names_the_script(monkeypatch, text, message):
    _shipped_with(monkeypatch, REVERSAL_MANIFEST, text)
    with raises(message):
        load_reversal_models()
    try:
        load_reversal_models()
    except ValueError as error:
        assert "python scripts/train_reversal_models.py" in str(error)


def test_a_manifest_with_other_settings_is_refused(monkeypatch):
    manifest = json.loads(seq2seq_training.read_shipped(REVERSAL_MANIFEST, ""))
    manifest["config"] = dict(manifest["config"], steps=301)
    _shipped_with(monkeypatch, REVERSAL_MANIFEST, json.dumps(manifest).encode())
    with raises("differs from the library's"):
        load_reversal_models()
