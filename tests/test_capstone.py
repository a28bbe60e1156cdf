"""Chapter 12's shipped models: they load, match the manifest, and bad files are refused."""

import json

import pytest
import torch
from exercise_answers import start_of_word_weight
from helpers import assert_repeats_first_evaluations

from attnbook import (
    CharVocabulary,
    TinyDecoder,
    build_capstone_model,
    causal_mask,
    evaluate_loss,
    load_capstone_models,
    load_genesis,
    set_seed,
    train_capstone_model,
    train_language_model,
    train_validation_split,
)
from attnbook.analysis.word_start import word_start_weight
from attnbook.models import capstone
from attnbook.models.shipped import sha256_of, shipped_file


@pytest.fixture(scope="module")
def loaded():
    return load_capstone_models("cpu")


@pytest.fixture(scope="module")
def split():
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(
        vocabulary.encode(text), capstone.VALIDATION_FRACTION
    )
    return vocabulary, train_ids, validation_ids


def test_models_match_the_manifest_and_the_settings(loaded, split):
    vocabulary, _, _ = split
    manifest = loaded.manifest
    assert manifest["sha256"] == sha256_of(shipped_file(capstone.WEIGHTS).read_bytes())
    assert manifest["config"] == capstone.capstone_config(len(vocabulary))
    assert manifest["characters"] == "".join(vocabulary.characters)
    assert manifest["threads"] == 1 and manifest["bytes"] <= 2 * 2**20
    expected_kinds = {"MHA": "mha", "GQA": "gqa", "MQA": "mqa", "MLA": "mla"}
    assert list(loaded.models) == list(capstone.VARIANTS)
    for name, model in loaded.models.items():
        assert not model.training and model.variant == expected_kinds[name]
        assert capstone.count_parameters(model) == manifest["variants"][name]["parameters"]


def test_fresh_evaluation_equals_the_manifests_final_loss(loaded, split):
    _, _, validation_ids = split
    training = capstone.TRAINING
    for name, model in loaded.models.items():
        history = loaded.histories[name]
        recorded = loaded.manifest["variants"][name]
        assert history.steps == list(range(0, training["steps"] + 1, training["eval_every"]))
        assert history.validation_losses[-1] == recorded["validation_loss"]
        loss = evaluate_loss(
            model, validation_ids, training["block_size"], max_blocks=training["eval_blocks"]
        )
        assert loss == pytest.approx(recorded["validation_loss"], abs=1e-5), name


def test_changed_weights_are_refused_with_the_command_to_run(monkeypatch):
    shipped = capstone._read_shipped

    def tampered(name):
        data = shipped(name)
        return data[:-1] + bytes([data[-1] ^ 1]) if name == capstone.WEIGHTS else data

    monkeypatch.setattr(capstone, "_read_shipped", tampered)
    with pytest.raises(ValueError, match="differs from the manifest's .* re-run `python scripts/"):
        load_capstone_models("cpu")


def test_a_missing_file_names_the_script(monkeypatch):
    monkeypatch.setattr(capstone, "WEIGHTS", "no_such_file.pt")
    with pytest.raises(FileNotFoundError, match="python scripts/train_capstone_models.py"):
        load_capstone_models("cpu")


def test_a_manifest_from_other_settings_is_refused(monkeypatch):
    shipped = capstone._read_shipped

    def other_settings(name):
        data = shipped(name)
        if name != capstone.MANIFEST:
            return data
        manifest = json.loads(data)
        manifest["config"]["training"]["lr"] = 1e-3
        return json.dumps(manifest).encode()

    monkeypatch.setattr(capstone, "_read_shipped", other_settings)
    with pytest.raises(ValueError, match=r"differs from .* in \['training'\].* re-run `python"):
        load_capstone_models("cpu")


def test_weights_that_do_not_fit_their_model_are_refused(monkeypatch):
    states = capstone.read_state_dict(shipped_file(capstone.WEIGHTS).read_bytes())
    states["MQA"] = states["MHA"]  # MHA's key/value projections are wider than MQA's

    monkeypatch.setattr(capstone, "read_state_dict", lambda data: states)
    with pytest.raises(ValueError, match="the MQA weights do not fit its model: re-run"):
        load_capstone_models("cpu")


def test_matched_widths_give_parameter_counts_within_one_width_step(split):
    vocabulary, _, _ = split
    d_model, n_layers = capstone.MODEL["d_model"], capstone.MODEL["n_layers"]
    one_width_step = n_layers * (2 * d_model + 1)  # parameters one more MLP unit adds
    counts = {
        name: capstone.count_parameters(build_capstone_model(name, len(vocabulary)))
        for name in capstone.VARIANTS
    }
    widths = capstone.matched_mlp_widths(len(vocabulary))
    assert widths["MHA"] == 4 * d_model and len(set(widths.values())) == 4
    for name, count in counts.items():
        assert abs(count - counts["MHA"]) <= one_width_step / 2, name


def test_build_seeds_like_the_chapter_and_leaves_the_random_state_alone(split):
    vocabulary, _, _ = split
    state_before = torch.random.get_rng_state()
    built = build_capstone_model("GQA", len(vocabulary))
    assert torch.equal(torch.random.get_rng_state(), state_before)
    set_seed(0)
    width = capstone.matched_mlp_widths(len(vocabulary))["GQA"]
    chapter = TinyDecoder(len(vocabulary), **capstone.MODEL, n_kv_heads=2, mlp_width=width)
    for key, expected in chapter.state_dict().items():
        assert torch.equal(built.state_dict()[key], expected), key


def test_an_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="variant"):
        build_capstone_model("MoE", 60)


def test_training_is_deterministic_on_one_thread_and_restores_the_thread_count(split):
    vocabulary, train_ids, validation_ids = split
    few_windows = validation_ids[: 4 * capstone.TRAINING["block_size"] + 1]  # fast evaluations
    threads = torch.get_num_threads()
    runs = [
        train_capstone_model("MLA", len(vocabulary), train_ids, few_windows, steps=3)
        for _ in range(2)
    ]
    assert torch.get_num_threads() == threads
    (first_model, first_history), (second_model, second_history) = runs
    assert first_history == second_history and first_history.steps == [0, 3]
    assert first_history.validation_losses[1] < first_history.validation_losses[0]
    for key, value in first_model.state_dict().items():
        assert torch.equal(value, second_model.state_dict()[key]), key


def test_lr_overrides_only_the_learning_rate(split):
    """scripts/train_capstone_seeds.py --lr: the same run as train_language_model at that rate."""
    vocabulary, train_ids, validation_ids = split
    few_windows = validation_ids[: 4 * capstone.TRAINING["block_size"] + 1]  # fast evaluations
    _, history = train_capstone_model(
        "MHA", len(vocabulary), train_ids, few_windows, steps=2, seed=1, lr=1e-2
    )
    model = build_capstone_model("MHA", len(vocabulary), seed=1)
    settings = dict(capstone.TRAINING, steps=2, seed=1, lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = train_language_model(model, train_ids, few_windows, **settings)
    finally:
        torch.set_num_threads(threads)
    assert history == expected
    _, default_rate = train_capstone_model(
        "MHA", len(vocabulary), train_ids, few_windows, steps=2, seed=1
    )
    assert default_rate.validation_losses[-1] != history.validation_losses[-1]


@pytest.mark.parametrize("variant", ["GQA", "MQA", "MLA"])
def test_the_recipes_first_steps_repeat_the_shipped_history(loaded, split, variant):
    """Chapter 12 re-runs MHA's first 25 steps; here the other three variants' (no full run)."""
    vocabulary, train_ids, validation_ids = split
    check_steps = capstone.TRAINING["eval_every"]  # the first recorded loss after step 0
    _, history = train_capstone_model(
        variant, len(vocabulary), train_ids, validation_ids, steps=check_steps
    )
    recorded = loaded.histories[variant]
    assert history.steps == [0, check_steps]
    assert_repeats_first_evaluations(history, recorded)


def test_exercise_3s_solution_finds_the_start_of_word_heads(loaded, split):
    """The numbers of chapter 12's exercise 3 solution, on the shipped MHA model."""
    vocabulary, _, validation_ids = split
    block_size = capstone.MODEL["max_len"]
    windows = validation_ids[: 16 * block_size].view(16, block_size)  # (B, T)
    with torch.no_grad():
        weights = loaded.models["MHA"].attention_weights(windows)  # (L, B, H, T, T)
    separator_ids = vocabulary.encode(" \n").tolist()  # a space or a line break ends a word
    found = start_of_word_weight(weights, windows, separator_ids)  # (L, H)
    steps = torch.arange(1, block_size + 1)[:, None]  # (T, 1): keys each query sees
    uniform_weights = (causal_mask(block_size) / steps).expand_as(weights)
    uniform = start_of_word_weight(uniform_weights, windows, separator_ids)  # (L, H)
    torch.testing.assert_close(uniform, torch.full_like(uniform, uniform[0, 0].item()))
    assert round(uniform[0, 0].item(), 2) == 0.05
    assert [round(v, 2) for v in found[1, 1:3].tolist()] == [0.26, 0.23]
    assert found[1].argmax().item() == 1
    assert [round(v, 1) for v in (found[1, 1:3] / uniform[1, 1:3]).tolist()] == [5.3, 4.6]
    assert round(found[0, 0].item(), 2) == 0.18 and found[0, 0] / uniform[0, 0] < 4


def test_layer_0s_heads_read_one_and_two_characters_back(loaded, split):
    """The numbers chapter 12 quotes for layer 0's heads of the shipped MHA model."""
    _, _, validation_ids = split
    block_size = capstone.MODEL["max_len"]
    windows = validation_ids[: 16 * block_size].view(16, block_size)  # (B, T)
    with torch.no_grad():
        weights = loaded.models["MHA"].attention_weights(windows)  # (L, B, H, T, T)
    # (L, H) for k = 1, 2: mean weight on the key k characters back
    back = [weights.diagonal(offset=-k, dim1=-2, dim2=-1).mean(dim=(1, 3)) for k in (1, 2)]
    uniform_two_back = (1 / torch.arange(3, block_size + 1)).mean().item()
    assert [round(v, 2) for v in back[0][0].tolist()] == [0.74, 0.16, 0.32, 0.45]
    assert back[0].argmax().item() == 0  # layer 0, head 0: the previous-character head
    two_back = back[1][0] / uniform_two_back  # (H,): layer 0, against uniform attention
    assert two_back.argmax().item() == 3 and round(two_back[3].item(), 1) == 3.4
    assert round(back[1][0, 3].item(), 2) == 0.18 and round(uniform_two_back, 2) == 0.05


def test_the_start_of_word_heads_without_a_words_first_two_letters(loaded, split):
    """Chapter 12's start-of-word numbers: queries on a word's third letter or later only."""
    vocabulary, _, validation_ids = split
    block_size = capstone.MODEL["max_len"]
    windows = validation_ids[: 16 * block_size].view(16, block_size)  # (B, T)
    with torch.no_grad():
        weights = loaded.models["MHA"].attention_weights(windows)  # (L, B, H, T, T)
    separator_ids = vocabulary.encode(" \n").tolist()  # a space or a line break ends a word
    found = word_start_weight(weights, windows, separator_ids)  # (L, H)
    steps = torch.arange(1, block_size + 1)[:, None]  # (T, 1): keys each query sees
    uniform_weights = (causal_mask(block_size) / steps).expand_as(weights)
    uniform = word_start_weight(uniform_weights, windows, separator_ids)  # (L, H)
    torch.testing.assert_close(uniform, torch.full_like(uniform, uniform[0, 0].item()))
    ratio = found / uniform  # (L, H)
    assert round(uniform[0, 0].item(), 3) == 0.045
    assert round(found[0, 0].item(), 2) == 0.03 and ratio[0, 0] < 1
    assert [round(v, 2) for v in found[1, 1:3].tolist()] == [0.27, 0.22]
    assert [round(v, 1) for v in ratio[1, :3].tolist()] == [3.2, 6.0, 4.8]
    assert round(ratio[0].max().item(), 1) == 2.1 and ratio[0].argmax().item() == 3
    # with every query kept, the previous-character head scores about 3.6 x uniform
    every = start_of_word_weight(weights, windows, separator_ids)  # (L, H)
    every_uniform = start_of_word_weight(uniform_weights, windows, separator_ids)  # (L, H)
    assert round((every[0, 0] / every_uniform[0, 0]).item(), 1) == 3.6


def test_the_seed_histories_hold_every_variant_but_mha_with_seeds_1_and_2(loaded):
    seeds = capstone.load_seed_histories()
    assert list(seeds) == ["GQA", "MQA", "MLA"]
    for name, runs in seeds.items():
        assert list(runs) == [1, 2], name
        for history in runs.values():
            assert history.steps == loaded.histories[name].steps  # every 25 steps to 400
            # another seed, another run: not the shipped seed-0 history
            assert history.validation_losses != loaded.histories[name].validation_losses


def test_the_seed_histories_repeat_a_fresh_run_with_that_seed(split):
    """GQA with seed 1, the first 25 steps: its weights and its batches follow the seed."""
    vocabulary, train_ids, validation_ids = split
    recorded = capstone.load_seed_histories()["GQA"][1]
    check_steps = capstone.TRAINING["eval_every"]
    _, history = train_capstone_model(
        "GQA", len(vocabulary), train_ids, validation_ids, steps=check_steps, seed=1
    )
    assert_repeats_first_evaluations(history, recorded)


def test_a_seed_file_from_other_settings_or_missing_is_refused(monkeypatch):
    shipped = capstone.read_shipped

    def other_settings(name, regenerate):
        manifest = json.loads(shipped(name, regenerate))
        manifest["config"]["variants"]["MLA"]["kv_latent_dim"] = 16
        return json.dumps(manifest).encode()

    monkeypatch.setattr(capstone, "read_shipped", other_settings)
    with pytest.raises(
        ValueError, match=r"in \['variants'\].* re-run `python scripts/train_capstone_"
    ):
        capstone.load_seed_histories()
    monkeypatch.setattr(capstone, "read_shipped", shipped)
    monkeypatch.setattr(capstone, "SEED_HISTORIES", "no_such_file.json")
    with pytest.raises(FileNotFoundError, match="python scripts/train_capstone_seeds.py"):
        capstone.load_seed_histories()


def test_the_longer_runs_are_the_librarys_settings_for_1500_steps_and_the_readmes_file(loaded):
    """data/capstone_longer.json, chapter 12's answer to exercise 2: MHA and MQA with seeds 0 to
    2, the library's settings but 1,500 steps; seed 0 repeats the shipped history up to step
    400; data/README.md records the file's sha256."""
    data = shipped_file("capstone_longer.json").read_bytes()
    record = json.loads(data)
    expected = capstone.seeds_config(record["config"]["model"]["vocab_size"])
    expected["training"] = dict(expected["training"], steps=1500)
    assert record["config"] == expected
    assert record["variants"] == ["MHA", "MQA"] and record["seeds"] == [0, 1, 2]
    for name in record["variants"]:
        assert list(record["histories"][name]) == ["0", "1", "2"]
        run, shipped = record["histories"][name]["0"], loaded.histories[name]
        assert run["steps"][: len(shipped.steps)] == shipped.steps and run["steps"][-1] == 1500
        up_to_400 = run["validation_losses"][: len(shipped.steps)]
        for live, recorded in zip(up_to_400, shipped.validation_losses, strict=True):
            assert abs(live - recorded) <= 1e-5, (name, live, recorded)
    assert sha256_of(data) in shipped_file("README.md").read_text()


def test_the_learning_rate_sweep_is_the_librarys_settings_and_the_readmes_file():
    """data/capstone_lr_sweep.json, chapter 12's check of MLA - MHA at half and twice the
    learning rate: the library's settings but the rate, MHA and MLA with seeds 0 to 2, MLA
    behind with every seed and rate; data/README.md records the file's sha256."""
    data = shipped_file("capstone_lr_sweep.json").read_bytes()
    record = json.loads(data)
    expected = capstone.seeds_config(record["config"]["model"]["vocab_size"])
    expected["training"] = {k: v for k, v in expected["training"].items() if k != "lr"}
    assert record["config"] == expected
    assert record["variants"] == ["MHA", "MLA"] and record["seeds"] == [0, 1, 2]
    rates = record["learning_rates"]
    assert [rate / capstone.TRAINING["lr"] for rate in rates] == [0.5, 2.0]
    for losses in record["final_validation_losses"].values():
        assert all(losses["MLA"][seed] > losses["MHA"][seed] for seed in ("0", "1", "2"))
    assert sha256_of(data) in shipped_file("README.md").read_text()


def test_a_seed_changes_the_initial_weights_and_the_default_is_the_shipped_one(split):
    vocabulary, _, _ = split
    default = build_capstone_model("MQA", len(vocabulary)).state_dict()
    zero = build_capstone_model("MQA", len(vocabulary), seed=0).state_dict()
    one = build_capstone_model("MQA", len(vocabulary), seed=1).state_dict()
    assert all(torch.equal(default[key], zero[key]) for key in default)
    assert not torch.equal(default["token_embedding.weight"], one["token_embedding.weight"])


def test_a_seed_run_record_overrides_only_the_step_count():
    config = {"model": {"vocab_size": 65}, "training": {"steps": 400, "lr": 3e-3}}
    record = capstone.seed_run_record("python scripts/x.py", config, [1, 2], steps=25)
    assert record["made_by"] == "python scripts/x.py" and record["seeds"] == [1, 2]
    assert record["config"]["training"] == {"steps": 25, "lr": 3e-3}
    assert config["training"]["steps"] == 400  # the caller's config is left as it was
    unchanged = capstone.seed_run_record("python scripts/x.py", config, [1], steps=None)
    assert unchanged["config"] is config and "batch order" in unchanged["seed_fixes"]
