"""The shipped reference model: it loads, hash and loss match the manifest, bad files refused."""

import json
import re

import pytest
import torch

from attnbook import (
    CharVocabulary,
    evaluate_loss,
    load_genesis,
    load_reference_model,
    train_validation_split,
)
from attnbook.analysis import head_analysis as analysis
from attnbook.models import reference_model as reference


@pytest.fixture(scope="module")
def loaded():
    return load_reference_model("cpu")


def test_validation_loss_equals_the_manifests(loaded):
    manifest = loaded.manifest
    text = load_genesis()
    assert loaded.vocabulary.characters == CharVocabulary(text).characters
    validation = manifest["validation"]
    _, validation_ids = train_validation_split(
        loaded.vocabulary.encode(text), validation["fraction"]
    )
    loss = evaluate_loss(
        loaded.model, validation_ids, validation["block_size"], max_blocks=validation["max_blocks"]
    )
    assert loss == pytest.approx(manifest["validation_loss"], abs=1e-4)
    assert manifest["curve"]["validation_loss"][-1] == manifest["validation_loss"]


def test_model_matches_its_config_and_is_small(loaded):
    config = loaded.manifest["config"]
    model = loaded.model
    assert not model.training and model.variant == "mha"
    assert (len(model.blocks), model.max_len) == (config["n_layers"], config["max_len"])
    assert loaded.manifest["bytes"] <= 4 * 2**20


def test_changed_weights_are_refused_with_the_command_to_run(monkeypatch):
    shipped = reference._read_shipped

    def tampered(name):
        data = shipped(name)
        return data[:-1] + bytes([data[-1] ^ 1]) if name == reference.WEIGHTS else data

    monkeypatch.setattr(reference, "_read_shipped", tampered)
    with pytest.raises(ValueError, match="differs from the manifest's .* re-run `python scripts/"):
        load_reference_model("cpu")


def test_a_missing_file_names_the_script(monkeypatch):
    monkeypatch.setattr(reference, "WEIGHTS", "no_such_file.pt")
    with pytest.raises(FileNotFoundError, match="python scripts/train_reference_model.py"):
        load_reference_model("cpu")


def test_weights_that_do_not_fit_the_config_are_refused(monkeypatch):
    shipped = reference._read_shipped

    def other_config(name):
        data = shipped(name)
        if name != reference.MANIFEST:
            return data
        manifest = json.loads(data)
        manifest["config"]["n_layers"] += 1
        return json.dumps(manifest).encode()

    monkeypatch.setattr(reference, "_read_shipped", other_config)
    with pytest.raises(ValueError, match="does not fit the manifest's config"):
        load_reference_model("cpu")


def test_the_model_has_learned_far_more_than_character_frequencies(loaded):
    text = load_genesis()
    train_ids, validation_ids = train_validation_split(loaded.vocabulary.encode(text), 0.1)
    counts = torch.bincount(train_ids, minlength=len(loaded.vocabulary)).double() + 1  # (V,)
    log_probs = (counts / counts.sum()).log()  # (V,): the unigram model
    unigram_loss = -log_probs[validation_ids].mean().item()
    assert unigram_loss > 3.0 and loaded.manifest["validation_loss"] < unigram_loss - 1.0


def test_chapter_13_exercise_4_numbers(loaded):
    # the answer's numbers: layer 0's previous-character shares on chapter 13's 32 repeated
    # random-word sequences and on 32 x 120 uniformly random characters
    model, vocab = loaded.model, loaded.vocabulary
    words = sorted(set(re.findall(r"[A-Za-z]+", load_genesis())))
    generator = torch.Generator().manual_seed(1)
    strings = []
    for _ in range(32):
        picks = torch.randint(len(words), (40,), generator=generator).tolist()
        strings.append(" ".join(words[i] for i in picks)[:60])
    repeated = torch.stack([vocab.encode(s + " " + s) for s in strings])[:, :-1]  # (32, 120)
    noise = torch.randint(len(vocab), (32, 120), generator=torch.Generator().manual_seed(0))
    shares = {}
    for name, tokens in (("words", repeated), ("noise", noise)):
        weights = model.attention_weights(tokens)  # (L, B, H, T, T)
        shares[name] = analysis.head_statistics(weights, tokens, vocab.characters)["previous"][0]
    assert [round(shares["words"][h].item(), 2) for h in (7, 1)] == [0.38, 0.30]
    assert round(shares["words"].sum().item(), 2) == 1.46
    assert [round(shares["noise"][h].item(), 2) for h in (7, 1)] == [0.31, 0.24]
    assert round(shares["noise"].sum().item(), 2) == 1.23
