"""The book's trained reference model: a character-level TinyDecoder on Genesis, shipped in data/.

``scripts/train_reference_model.py`` trains it (seeded, on the CPU) and writes two files into
``data/``: ``reference_model.pt``, the weights (a state dict, read with ``weights_only=True``),
and ``reference_model.json``, the manifest: configuration, vocabulary, seed, steps, optimiser
settings, the validation loss at the end, the validation-loss curve, the sha256 of the weights
and the torch version. :func:`load_reference_model` rebuilds the model from the manifest and
refuses weights whose hash or shapes do not match it, saying what to run (the file and hash
helpers are :mod:`attnbook.models.shipped`'s).
"""

from dataclasses import dataclass

import torch

from attnbook.core.device import get_device
from attnbook.models.decoder import TinyDecoder
from attnbook.models.shipped import (
    check_sha256,
    manifest_fields,
    read_manifest,
    read_shipped,
    read_state_dict,
)
from attnbook.models.text import CharVocabulary

WEIGHTS = "reference_model.pt"
MANIFEST = "reference_model.json"
RETRAIN = "python scripts/train_reference_model.py"


@dataclass
class ReferenceModel:
    """The loaded model (in eval mode), its vocabulary and the manifest it was checked against."""

    model: TinyDecoder
    vocabulary: CharVocabulary
    manifest: dict


def _read_shipped(name: str) -> bytes:
    return read_shipped(name, RETRAIN)


def build_reference_decoder(config: dict) -> TinyDecoder:
    """An untrained TinyDecoder of the manifest's ``config`` (TinyDecoder's keyword arguments)."""
    config = dict(config)
    return TinyDecoder(config.pop("vocab_size"), **config)


def load_reference_model(device: torch.device | str | None = None) -> ReferenceModel:
    """The reference model on ``device`` (default :func:`attnbook.get_device`), in eval mode.

    Raises ``FileNotFoundError`` when a shipped file is missing and ``ValueError`` when the
    manifest is truncated or incomplete or the weights' sha256 or shapes differ from the
    manifest's; each names the file and the script to re-run.
    """
    manifest = read_manifest(MANIFEST, _read_shipped(MANIFEST), RETRAIN)
    weights = _read_shipped(WEIGHTS)
    with manifest_fields(MANIFEST, RETRAIN):
        sha256, config, characters = manifest["sha256"], manifest["config"], manifest["characters"]
        check_sha256(WEIGHTS, weights, sha256, RETRAIN)
        model = build_reference_decoder(config)
    state = read_state_dict(weights)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(
            f"data/{WEIGHTS} does not fit the manifest's config {manifest['config']}: "
            f"re-run `{RETRAIN}` ({error})"
        ) from error
    vocabulary = CharVocabulary(characters)
    device = get_device() if device is None else torch.device(device)
    return ReferenceModel(model.to(device).eval(), vocabulary, manifest)
