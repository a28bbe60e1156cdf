"""data/mla_rescaled.json: chapter 12's MLA with k_up and v_up scaled by sqrt(3) at init."""

import json
import math

import pytest
import torch
from helpers import assert_repeats_first_evaluations

from attnbook import CharVocabulary, load_genesis, train_validation_split
from attnbook.models import capstone
from attnbook.models.shipped import shipped_file


@pytest.fixture(scope="module")
def recorded():
    return json.loads(shipped_file(capstone.MLA_RESCALED).read_text())


def test_the_file_records_the_capstone_settings_and_the_factor(recorded):
    config = recorded["config"]
    assert config["rescaled"] == {"variant": "MLA", "weights": ["k_up", "v_up"], "factor": 3**0.5}
    assert config["training"] == dict(capstone.TRAINING, seed="per run")
    assert config == capstone.mla_rescaled_config(config["model"]["vocab_size"], math.sqrt(3))
    assert recorded["seeds"] == [0, 1, 2] and recorded["threads"] == 1
    assert recorded["torch_version"] and recorded["training_seconds"] > 0
    assert recorded["made_by"].startswith("python scripts/train_mla_rescaled.py")
    # the control, factor 1.0 and seed 0, repeated the shipped MLA history to rounding
    shipped = capstone.load_capstone_models("cpu").histories["MLA"]
    control = recorded["control"]
    pairs = zip(control["validation_losses"], shipped.validation_losses, strict=True)
    difference = max(abs(live - recorded) for live, recorded in pairs)
    assert difference == control["largest_difference_from_shipped_mla"] <= 1e-5


def test_the_loader_returns_the_files_numbers(recorded):
    loaded = capstone.load_mla_rescaled()
    assert loaded["factor"] == math.sqrt(3) and loaded["control_difference"] <= 1e-5
    assert sorted(loaded["histories"]) == [0, 1, 2]
    for seed, history in loaded["histories"].items():
        run = recorded["histories"][str(seed)]
        assert history.steps == run["steps"] == list(range(0, 401, 25))
        assert history.validation_losses == run["validation_losses"]
        assert history.final_training_loss == run["final_training_loss"]


def test_the_recipes_first_steps_repeat_the_rescaled_run():
    """Seed 1, k_up and v_up times sqrt(3), the first 25 steps on one thread."""
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(
        vocabulary.encode(text), capstone.VALIDATION_FRACTION
    )
    model = capstone.build_capstone_model("MLA", len(vocabulary), seed=1)
    capstone.scale_mla_up_projections(model, math.sqrt(3))
    check_steps = capstone.TRAINING["eval_every"]
    history = capstone.fit_capstone_model(
        model, train_ids, validation_ids, steps=check_steps, seed=1
    )
    assert_repeats_first_evaluations(history, capstone.load_mla_rescaled()["histories"][1])


def test_scaling_the_up_projections_touches_only_k_up_and_v_up():
    model = capstone.build_capstone_model("MLA", 10, seed=0)
    before = {name: p.clone() for name, p in model.named_parameters()}
    capstone.scale_mla_up_projections(model, 3.0)
    for name, parameter in model.named_parameters():
        factor = 3.0 if name.endswith(("k_up.weight", "v_up.weight")) else 1.0
        torch.testing.assert_close(parameter, before[name] * factor, rtol=0, atol=0)


def test_a_rescaled_file_from_other_settings_or_missing_is_refused(monkeypatch):
    shipped = capstone.read_shipped

    def other_settings(name, regenerate):
        manifest = json.loads(shipped(name, regenerate))
        manifest["config"]["training"]["lr"] = 1e-3
        return json.dumps(manifest).encode()

    monkeypatch.setattr(capstone, "read_shipped", other_settings)
    with pytest.raises(ValueError, match=r"re-run `python scripts/train_mla_rescaled.py`"):
        capstone.load_mla_rescaled()
    monkeypatch.setattr(capstone, "read_shipped", shipped)
    monkeypatch.setattr(capstone, "MLA_RESCALED", "no_such_file.json")
    with pytest.raises(FileNotFoundError, match="python scripts/train_mla_rescaled.py"):
        capstone.load_mla_rescaled()
