"""Chapter 7's shipped models: they load, reach the manifest's loss, and bad files are refused."""

import json
import math

import pytest
import torch

from attnbook import (
    CharVocabulary,
    TinyDecoder,
    build_position_model,
    evaluate_loss,
    load_genesis,
    load_position_models,
    train_position_model,
    train_validation_split,
)
from attnbook.models import position_models
from attnbook.models.shipped import sha256_of, shipped_file

TRIGRAM = 1.735  # an add-1/2 trigram table on the same split (book/07_positions.ipynb)


@pytest.fixture(scope="module")
def loaded():
    return load_position_models("cpu")


@pytest.fixture(scope="module")
def split():
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(
        vocabulary.encode(text), position_models.VALIDATION_FRACTION
    )
    return vocabulary, train_ids, validation_ids


def test_models_match_the_manifest_and_the_settings(loaded, split):
    vocabulary, _, _ = split
    manifest = loaded.manifest
    assert manifest["sha256"] == sha256_of(shipped_file(position_models.WEIGHTS).read_bytes())
    assert manifest["config"] == position_models.position_models_config(len(vocabulary))
    assert manifest["characters"] == "".join(vocabulary.characters)
    assert manifest["threads"] == 1 and manifest["bytes"] <= 3 * 2**20
    keys = [(s, seed) for s in position_models.SCHEMES for seed in position_models.SEEDS]
    assert list(loaded.models) == keys and len(keys) == 10
    for (scheme, _), model in loaded.models.items():
        assert not model.training and model.positions == scheme


def test_every_model_reaches_its_manifest_loss_and_beats_a_trigram_table(loaded, split):
    _, _, validation_ids = split
    training = position_models.TRAINING
    for key, model in loaded.models.items():
        recorded = loaded.manifest["models"][position_models.model_key(*key)]
        history = loaded.histories[key]
        steps = position_models.STEPS[key[0]]
        assert history.steps == list(range(0, steps + 1, training["eval_every"]))
        assert history.validation_losses[-1] < history.validation_losses[0] - 1.0, key
        loss = evaluate_loss(
            model,
            validation_ids,
            training["block_size"],
            max_blocks=position_models.KEY_BLOCKS,
        )
        assert loss == pytest.approx(recorded["validation_loss"], abs=1e-4), key
        assert loss < TRIGRAM - 0.05, key


def test_changed_weights_are_refused_with_the_command_to_run(monkeypatch):
    shipped = position_models._read_shipped

    def tampered(name):
        data = shipped(name)
        return data[:-1] + bytes([data[-1] ^ 1]) if name == position_models.WEIGHTS else data

    monkeypatch.setattr(position_models, "_read_shipped", tampered)
    with pytest.raises(ValueError, match="differs from the manifest's .* re-run `OMP_NUM"):
        load_position_models("cpu")


def test_a_missing_file_names_the_script(monkeypatch):
    monkeypatch.setattr(position_models, "WEIGHTS", "no_such_file.pt")
    with pytest.raises(FileNotFoundError, match="scripts/train_position_models.py"):
        load_position_models("cpu")


def test_a_manifest_from_other_settings_is_refused(monkeypatch):
    shipped = position_models._read_shipped

    def other_settings(name):
        data = shipped(name)
        if name != position_models.MANIFEST:
            return data
        manifest = json.loads(data)
        manifest["config"]["training"]["lr"] = 1e-2
        return json.dumps(manifest).encode()

    monkeypatch.setattr(position_models, "_read_shipped", other_settings)
    with pytest.raises(ValueError, match=r"differs from .* in \['training'\].* re-run `OMP"):
        load_position_models("cpu")


def test_weights_that_do_not_fit_their_model_are_refused(monkeypatch):
    states = position_models.read_state_dict(shipped_file(position_models.WEIGHTS).read_bytes())
    states["rope/1"] = states["learned/0"]  # a learned table RoPE's model has no place for

    monkeypatch.setattr(position_models, "read_state_dict", lambda data: states)
    with pytest.raises(ValueError, match="the rope/1 weights do not fit its model: re-run"):
        load_position_models("cpu")


def test_build_seeds_like_set_seed_and_leaves_the_random_state_alone(split):
    vocabulary, _, _ = split
    state_before = torch.random.get_rng_state()
    built = build_position_model("alibi", 1, len(vocabulary))
    assert torch.equal(torch.random.get_rng_state(), state_before)
    torch.manual_seed(1)
    expected = TinyDecoder(len(vocabulary), positions="alibi", **position_models.MODEL)
    for key, value in expected.state_dict().items():
        assert torch.equal(built.state_dict()[key], value), key


@pytest.mark.parametrize(("scheme", "seed"), [("relative", 0), ("rope", 2)])
def test_an_unknown_scheme_or_seed_is_refused(scheme, seed):
    with pytest.raises(ValueError, match="scheme" if scheme == "relative" else "seed"):
        build_position_model(scheme, seed, 60)


def test_training_is_deterministic_on_one_thread_and_restores_the_thread_count(split):
    vocabulary, train_ids, validation_ids = split
    few_windows = validation_ids[: 4 * position_models.TRAINING["block_size"] + 1]
    threads = torch.get_num_threads()
    runs = [
        train_position_model("rope", 0, len(vocabulary), train_ids, few_windows, steps=3)
        for _ in range(2)
    ]
    assert torch.get_num_threads() == threads
    (first_model, first_history), (second_model, second_history) = runs
    assert first_history == second_history and first_history.steps == [0, 3]
    assert first_history.validation_losses[1] < first_history.validation_losses[0]
    assert math.isfinite(first_history.final_training_loss)
    for key, value in first_model.state_dict().items():
        assert torch.equal(value, second_model.state_dict()[key]), key
