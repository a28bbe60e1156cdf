"""Train chapter 12's four tiny GPTs and write data/capstone_models.pt and its manifest.

MHA, GQA, MQA and MLA character-level TinyDecoders (D = 64, 4 heads, 2 layers, context 64,
MLP widths matched to about 112,000 parameters each), trained by
``attnbook.models.capstone.train_capstone_model`` on the first 90 % of Genesis: 400 AdamW steps
of 32
windows at learning rate 3e-3, seed 0, the validation loss every 25 steps. Training runs on one
CPU thread, so the same torch version on the same kind of CPU reproduces the weights and losses
exactly (chapter 12 retrains MHA live and checks this). About 20 s per variant on a 2-core
machine.

    python scripts/train_capstone_models.py                          # writes data/
    python scripts/train_capstone_models.py --steps 5 --output /tmp/capstone   # a smoke run
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from attnbook import CharVocabulary, load_genesis, train_validation_split
from attnbook.models.capstone import (
    MANIFEST,
    VALIDATION_FRACTION,
    VARIANTS,
    WEIGHTS,
    capstone_config,
    count_parameters,
    train_capstone_model,
)
from attnbook.models.shipped import write_shipped

DATA = Path(__file__).resolve().parent.parent / "data"


def train_all(steps: int | None) -> tuple[dict, dict, CharVocabulary]:
    """Train every variant; return their state dicts, their manifest entries, the vocabulary."""
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocabulary.encode(text), VALIDATION_FRACTION)
    states, entries = {}, {}
    for name in VARIANTS:
        start = time.perf_counter()
        model, history = train_capstone_model(
            name, len(vocabulary), train_ids, validation_ids, steps=steps
        )
        seconds = time.perf_counter() - start
        states[name] = model.state_dict()
        entries[name] = {
            "parameters": count_parameters(model),
            "validation_loss": history.validation_losses[-1],
            "final_training_loss": history.final_training_loss,
            "steps": history.steps,
            "validation_losses": history.validation_losses,
            "training_seconds": round(seconds, 1),
        }
        print(f"{name}: validation loss {history.validation_losses[-1]:.4f} in {seconds:.1f} s")
    return states, entries, vocabulary


def optimiser_settings(lr: float) -> dict:
    """AdamW's settings as train_language_model makes it: ``lr``, torch's other defaults."""
    defaults = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=lr).defaults
    settings = {key: defaults[key] for key in ("lr", "betas", "eps", "weight_decay")}
    return {"name": "AdamW", **settings, "schedule": "constant"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="default: the capstone's 400")
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    start = time.perf_counter()
    states, entries, vocabulary = train_all(args.steps)
    seconds = time.perf_counter() - start
    config = capstone_config(len(vocabulary))
    if args.steps is not None:
        config["training"] = dict(config["training"], steps=args.steps)
    manifest = {
        "made_by": " ".join(["python scripts/train_capstone_models.py", *sys.argv[1:]]),
        "config": config,
        "characters": "".join(vocabulary.characters),
        "data": "data/genesis_kjv.txt, first 90 % for training, last 10 % for validation",
        "optimiser": optimiser_settings(config["training"]["lr"]),
        "variants": entries,
        "torch_version": torch.__version__,
        "threads": 1,
        "training_seconds": round(seconds, 1),
    }
    size = write_shipped(args.output, WEIGHTS, states, MANIFEST, manifest)
    print(f"wrote {args.output / WEIGHTS} ({size:,} bytes) in {seconds:.0f} s")


if __name__ == "__main__":
    main()
