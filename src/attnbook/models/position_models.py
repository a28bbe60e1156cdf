"""Chapter 7's train-short-test-long models: one per position scheme and seed, trained and shipped.

One character-level :class:`attnbook.TinyDecoder` size (``MODEL``: 4 heads of width 16, so
RoPE has eight feature pairs and ALiBi the slopes 1/4 ... 1/256; tables of 256 rows so that
the learned model can be read at 256), five ``positions=`` schemes (``SCHEMES``), seeds
``SEEDS``, and one training recipe on windows of 64 characters (``TRAINING``, for
:func:`attnbook.train_language_model`). ``scripts/train_position_models.py`` trains them with
:func:`train_position_model` and writes ``data/position_models.pt`` (a dict "scheme/seed" ->
state dict, in float16) and its manifest ``data/position_models.json``;
:func:`load_position_models` rebuilds the models, checks the file against the manifest and the
manifest against these settings, and says what to re-run when either differs.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from attnbook.core._checks import check_choice
from attnbook.core.device import get_device
from attnbook.models.decoder import TinyDecoder
from attnbook.models.lm_training import TrainingHistory, train_language_model
from attnbook.models.shipped import (
    check_config,
    check_sha256,
    load_weights,
    manifest_fields,
    read_manifest,
    read_shipped,
    read_state_dict,
)

SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "none")
SEEDS = (0, 1)
MODEL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 256}
TRAINING = {  # train_language_model's keyword arguments but steps (AdamW, constant lr)
    "batch_size": 16,
    "block_size": 64,
    "lr": 3e-3,
    "eval_every": 100,
    "eval_blocks": 64,
}
# Steps per scheme: without positions the model learns far more slowly (at 700 steps its
# validation loss was 2.04, above the trigram table's 1.735), so it trains until it beats it.
STEPS = {"learned": 700, "sinusoidal": 700, "rope": 700, "alibi": 700, "none": 3000}
VALIDATION_FRACTION = 0.1  # the last 10 % of Genesis, as train_validation_split takes it
KEY_BLOCKS = 304  # the key metric: the loss over 304 windows of 64 (76 windows of 256)

WEIGHTS = "position_models.pt"
MANIFEST = "position_models.json"
RETRAIN = "OMP_NUM_THREADS=1 python scripts/train_position_models.py"


@dataclass
class PositionModels:
    """The trained models (eval mode) and their histories, by (scheme, seed), and the manifest."""

    models: dict[tuple[str, int], TinyDecoder]
    histories: dict[tuple[str, int], TrainingHistory]
    manifest: dict


def model_key(scheme: str, seed: int) -> str:
    """How the weights and the manifest name a model: ``"rope/1"``."""
    return f"{scheme}/{seed}"


def build_position_model(scheme: str, seed: int, vocab_size: int) -> TinyDecoder:
    """A freshly initialised model of ``scheme``, initialised after ``torch.manual_seed(seed)``.

    The model is built on a forked generator: the caller's random state is left as it was.
    """
    check_choice("scheme", scheme, SCHEMES)
    check_choice("seed", seed, SEEDS)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyDecoder(vocab_size, positions=scheme, **MODEL)


def train_position_model(
    scheme: str,
    seed: int,
    vocab_size: int,
    train_ids: Tensor,
    validation_ids: Tensor,
    *,
    steps: int | None = None,
) -> tuple[TinyDecoder, TrainingHistory]:
    """Build ``scheme``'s model for ``seed``; train it with ``TRAINING``, ``STEPS[scheme]`` steps.

    The data order is seeded with ``seed``; ``steps`` overrides the step count. Training runs
    on one CPU thread (the previous thread count is restored), so the weights are the same
    however the caller is run, given the same torch version and CPU. Returns the trained
    model (eval mode) and its validation history.
    """
    model = build_position_model(scheme, seed, vocab_size)
    settings = dict(TRAINING, steps=STEPS[scheme] if steps is None else steps)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        history = train_language_model(model, train_ids, validation_ids, **settings, seed=seed)
    finally:
        torch.set_num_threads(previous_threads)
    return model, history


def position_models_config(vocab_size: int) -> dict:
    """Every setting the shipped models depend on, as the manifest records it (JSON types)."""
    return {
        "model": {"vocab_size": vocab_size, **MODEL},
        "schemes": list(SCHEMES),
        "seeds": list(SEEDS),
        "training": TRAINING,
        "steps": STEPS,
        "validation_fraction": VALIDATION_FRACTION,
        "key_blocks": KEY_BLOCKS,
    }


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, RETRAIN)


def _check_config(manifest: dict) -> None:
    recorded = manifest["config"]
    expected = position_models_config(recorded["model"]["vocab_size"])
    check_config(MANIFEST, recorded, expected, "attnbook.models.position_models'", RETRAIN)


def load_position_models(device: torch.device | str | None = None) -> PositionModels:
    """The ten trained models on ``device`` (default :func:`attnbook.get_device`), eval mode.

    Keys are ``(scheme, seed)``. Raises ``FileNotFoundError`` when a shipped file is missing,
    and ``ValueError`` when the weights' sha256 differs from the manifest's, the manifest's
    config from this module's settings, or a state dict from its model, and when the manifest
    is truncated or incomplete; each error names the file and the script to re-run.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), RETRAIN)
    weights = _read_shipped(WEIGHTS)
    keys = [(scheme, seed) for scheme in SCHEMES for seed in SEEDS]
    with manifest_fields(MANIFEST, RETRAIN):
        check_sha256(WEIGHTS, weights, manifest["sha256"], RETRAIN)
        _check_config(manifest)
        vocab_size = manifest["config"]["model"]["vocab_size"]
        recorded = {key: manifest["models"][model_key(*key)] for key in keys}
        histories = {key: TrainingHistory.from_record(recorded[key]) for key in keys}
    states = read_state_dict(weights)
    device = get_device() if device is None else torch.device(device)
    models = {}
    for key in keys:
        model = build_position_model(*key, vocab_size)
        load_weights(model, states, model_key(*key), WEIGHTS, RETRAIN)  # float16 -> float32
        models[key] = model.to(device).eval()
    return PositionModels(models, histories, manifest)
