"""Chapter 12's capstone: four tiny GPTs that differ only in their attention, trained and shipped.

One character-level :class:`attnbook.TinyDecoder` size (``MODEL``), four attention variants
(``VARIANTS``: MHA, GQA, MQA, MLA, as TinyDecoder keyword arguments), each with the MLP width
that brings its parameter count closest to the MHA model's, and one training recipe
(``TRAINING``, for :func:`attnbook.train_language_model`). ``scripts/train_capstone_models.py``
trains the four with :func:`train_capstone_model` and writes ``data/capstone_models.pt`` (a
dict variant -> state dict) and its manifest ``data/capstone_models.json``;
:func:`load_capstone_models` rebuilds the models, checks the file against the manifest and the
manifest against these settings, and says what to re-run when either differs.
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

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

MODEL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 64}
VARIANTS = {  # name: TinyDecoder's attention keyword arguments
    "MHA": {"n_kv_heads": 4},
    "GQA": {"n_kv_heads": 2},
    "MQA": {"n_kv_heads": 1},
    "MLA": {"kv_latent_dim": 32},
}
TRAINING = {  # train_language_model's keyword arguments (AdamW, constant learning rate)
    "steps": 400,
    "batch_size": 32,
    "block_size": 64,
    "lr": 3e-3,
    "eval_every": 25,
    "eval_blocks": 64,
    "seed": 0,
}
INIT_SEED = 0  # torch's seed before each model is built
VALIDATION_FRACTION = 0.1  # the last 10 % of Genesis, as train_validation_split takes it

WEIGHTS = "capstone_models.pt"
MANIFEST = "capstone_models.json"
RETRAIN = "python scripts/train_capstone_models.py"


@dataclass
class CapstoneModels:
    """The trained models (eval mode) and their histories, by variant, and the manifest."""

    models: dict[str, TinyDecoder]
    histories: dict[str, TrainingHistory]
    manifest: dict


def count_parameters(module: nn.Module) -> int:
    """The number of numbers in ``module``'s parameters."""
    return sum(parameter.numel() for parameter in module.parameters())


def _decoder(variant: str, vocab_size: int, mlp_width: int) -> TinyDecoder:
    return TinyDecoder(vocab_size, **MODEL, mlp_width=mlp_width, **VARIANTS[variant])


def matched_mlp_widths(vocab_size: int) -> dict[str, int]:
    """Each variant's MLP width giving it the parameter count closest to the MHA model's.

    Every model starts at width 4 D; an MLP of width w has 2 D w + w + D parameters in each of
    L layers, so the difference from MHA is made up by 1 / (L (2 D + 1)) of it in width.
    The models it counts are built on a forked generator: the caller's random state is kept.
    """
    d_model, n_layers = MODEL["d_model"], MODEL["n_layers"]
    with torch.random.fork_rng(devices=[]):
        target = count_parameters(_decoder("MHA", vocab_size, 4 * d_model))
        widths = {}
        for name in VARIANTS:
            difference = target - count_parameters(_decoder(name, vocab_size, 4 * d_model))
            widths[name] = 4 * d_model + round(difference / (n_layers * (2 * d_model + 1)))
    return widths


def build_capstone_model(variant: str, vocab_size: int, *, seed: int = INIT_SEED) -> TinyDecoder:
    """A freshly initialised model of ``variant`` with its matched MLP width.

    Initialised after ``torch.manual_seed(seed)`` (default ``INIT_SEED``: as ``set_seed(0)``
    then ``TinyDecoder`` in chapter 12 does), but on a forked generator: the caller's random
    state is left as it was.
    """
    check_choice("variant", variant, tuple(VARIANTS))
    mlp_width = matched_mlp_widths(vocab_size)[variant]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _decoder(variant, vocab_size, mlp_width)


def train_capstone_model(
    variant: str,
    vocab_size: int,
    train_ids: Tensor,
    validation_ids: Tensor,
    *,
    steps: int | None = None,
    seed: int | None = None,
    lr: float | None = None,
) -> tuple[TinyDecoder, TrainingHistory]:
    """Build ``variant`` and train it with ``TRAINING`` (``steps`` overrides its step count,
    ``lr`` its learning rate).

    ``seed`` (default: the shipped models' ``INIT_SEED`` and ``TRAINING["seed"]``, both 0)
    fixes both the initial weights and the order of the batches, as in
    ``scripts/compare_head_counts.py``.

    Training runs on one CPU thread, and the previous thread count is restored afterwards:
    with one thread every sum is taken in the same order, so the weights and the history are
    the same however the caller is run (a script, a notebook, any ``OMP_NUM_THREADS``), given
    the same torch version and CPU. ``train_ids`` and ``validation_ids`` are 1-D token ids.
    Returns the trained model (eval mode) and its validation history.
    """
    model = build_capstone_model(variant, vocab_size, seed=INIT_SEED if seed is None else seed)
    history = fit_capstone_model(model, train_ids, validation_ids, steps=steps, seed=seed, lr=lr)
    return model, history


def fit_capstone_model(
    model: TinyDecoder,
    train_ids: Tensor,
    validation_ids: Tensor,
    *,
    steps: int | None = None,
    seed: int | None = None,
    lr: float | None = None,
) -> TrainingHistory:
    """Train a built capstone ``model`` in place as :func:`train_capstone_model` does (its
    ``TRAINING``, one CPU thread, ``steps``, ``seed`` and ``lr`` the same overrides); for a
    model changed between building and training, such as MLA with rescaled up-projections."""
    overrides = {"steps": steps, "seed": seed, "lr": lr}
    settings = TRAINING | {key: value for key, value in overrides.items() if value is not None}
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_language_model(model, train_ids, validation_ids, **settings)
    finally:
        torch.set_num_threads(previous_threads)


def scale_mla_up_projections(model: TinyDecoder, factor: float) -> None:
    """Multiply every MLA layer's ``k_up`` and ``v_up`` weights by ``factor``, in place: the
    rescaling behind ``data/mla_rescaled.json`` (``factor`` sqrt(3) there)."""
    with torch.no_grad():
        for block in model.blocks:
            block.attention.k_up.weight.mul_(factor)
            block.attention.v_up.weight.mul_(factor)


def seed_run_record(made_by: str, config: dict, seeds: list[int], steps: int | None) -> dict:
    """The fields a seed script's record starts with: the command that made it (``made_by``),
    ``config`` with ``steps`` (if given) in place of its training's step count, the seeds, what a
    seed fixes and which text the runs trained on."""
    if steps is not None:
        config = dict(config, training=dict(config["training"], steps=steps))
    return {
        "made_by": made_by,
        "config": config,
        "seeds": seeds,
        "seed_fixes": "the initial weights (torch.manual_seed) and the batch order",
        "data": "data/genesis_kjv.txt, first 90 % for training, last 10 % for validation",
    }


def capstone_config(vocab_size: int) -> dict:
    """Every setting the shipped models depend on, as the manifest records it (JSON types)."""
    widths = matched_mlp_widths(vocab_size)
    return {
        "model": {"vocab_size": vocab_size, **MODEL},
        "variants": {name: {**VARIANTS[name], "mlp_width": widths[name]} for name in VARIANTS},
        "training": TRAINING,
        "init_seed": INIT_SEED,
        "validation_fraction": VALIDATION_FRACTION,
    }


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, RETRAIN)


def _check_config(manifest: dict) -> None:
    recorded = manifest["config"]
    expected = capstone_config(recorded["model"]["vocab_size"])
    check_config(MANIFEST, recorded, expected, "attnbook.models.capstone's", RETRAIN)


def load_capstone_models(device: torch.device | str | None = None) -> CapstoneModels:
    """The four trained models on ``device`` (default :func:`attnbook.get_device`), eval mode.

    Raises ``FileNotFoundError`` when a shipped file is missing, and ``ValueError`` when the
    weights' sha256 differs from the manifest's, the manifest's config from this module's
    settings, or a state dict from its model, and when the manifest is truncated or
    incomplete; each error names the file and the script to re-run.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), RETRAIN)
    weights = _read_shipped(WEIGHTS)
    with manifest_fields(MANIFEST, RETRAIN):
        check_sha256(WEIGHTS, weights, manifest["sha256"], RETRAIN)
        _check_config(manifest)
        vocab_size = manifest["config"]["model"]["vocab_size"]
        recorded = {name: manifest["variants"][name] for name in VARIANTS}
        histories = {name: TrainingHistory.from_record(recorded[name]) for name in VARIANTS}
    states = read_state_dict(weights)
    device = get_device() if device is None else torch.device(device)
    models = {}
    for name in VARIANTS:
        model = build_capstone_model(name, vocab_size)
        load_weights(model, states, name, WEIGHTS, RETRAIN)
        models[name] = model.to(device).eval()
    return CapstoneModels(models, histories, manifest)


SEED_HISTORIES = "capstone_seeds.json"
RETRAIN_SEEDS = "python scripts/train_capstone_seeds.py"


def seeds_config(vocab_size: int) -> dict:
    """``capstone_config`` with the seed left to each run, as ``capstone_seeds.json`` records it."""
    config = capstone_config(vocab_size)
    config["training"] = dict(config["training"], seed="per run")
    config["init_seed"] = "per run"
    return config


def load_seed_histories() -> dict[str, dict[int, TrainingHistory]]:
    """The validation histories of the variants retrained with other seeds, {variant: {seed: h}}.

    ``data/capstone_seeds.json`` holds GQA, MQA and MLA trained with seeds 1 and 2 (each seed
    fixing the initial weights and the batch order), histories only; its config must be this
    module's (the seed apart). Raises as :func:`load_capstone_models` does, naming the script.
    """
    manifest = read_manifest(
        SEED_HISTORIES, read_shipped(SEED_HISTORIES, RETRAIN_SEEDS), RETRAIN_SEEDS
    )
    with manifest_fields(SEED_HISTORIES, RETRAIN_SEEDS):
        expected = seeds_config(manifest["config"]["model"]["vocab_size"])
        check_config(
            SEED_HISTORIES,
            manifest["config"],
            expected,
            "attnbook.models.capstone's",
            RETRAIN_SEEDS,
        )
        return {
            name: {
                int(seed): TrainingHistory.from_record(run)
                for seed, run in manifest["histories"][name].items()
            }
            for name in manifest["variants"]
        }


MLA_RESCALED = "mla_rescaled.json"
RETRAIN_RESCALED = "python scripts/train_mla_rescaled.py"
RESCALED_WEIGHTS = ("k_up", "v_up")  # MLA's up-projections, scaled at initialisation


def mla_rescaled_config(vocab_size: int, factor: float) -> dict:
    """``seeds_config`` with MLA's ``k_up`` and ``v_up`` weights times ``factor`` at init."""
    return dict(
        seeds_config(vocab_size),
        rescaled={"variant": "MLA", "weights": list(RESCALED_WEIGHTS), "factor": factor},
    )


def load_mla_rescaled() -> dict:
    """MLA's runs with ``k_up`` and ``v_up`` scaled at initialisation, from ``mla_rescaled.json``.

    Returns ``{"factor": f, "histories": {seed: TrainingHistory}, "control_difference": d}``,
    ``d`` the control run's (factor 1.0, seed 0) largest difference from the shipped MLA
    history. The file's config must be this module's with the factor it records. Raises as
    :func:`load_capstone_models` does, naming ``scripts/train_mla_rescaled.py``.
    """
    manifest = read_manifest(
        MLA_RESCALED, read_shipped(MLA_RESCALED, RETRAIN_RESCALED), RETRAIN_RESCALED
    )
    with manifest_fields(MLA_RESCALED, RETRAIN_RESCALED):
        recorded = manifest["config"]
        factor = recorded["rescaled"]["factor"]
        expected = mla_rescaled_config(recorded["model"]["vocab_size"], factor)
        check_config(
            MLA_RESCALED, recorded, expected, "attnbook.models.capstone's", RETRAIN_RESCALED
        )
        histories = {
            int(seed): TrainingHistory.from_record(run)
            for seed, run in manifest["histories"].items()
        }
        return {
            "factor": factor,
            "histories": histories,
            "control_difference": manifest["control"]["largest_difference_from_shipped_mla"],
        }
