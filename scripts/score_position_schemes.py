"""Chapter 7's train-short-test-long runs, scored on every validation window; writes data/.

book/07_positions.ipynb trains a character-level TinyDecoder (D = 32, 4 heads, 2 layers,
256-row tables) for 80 steps on windows of 64 characters with each position scheme and two
seeds, then scores the first 16 windows of 256 validation characters (4096 of 19682), which
keeps the chapter fast. Sixteen windows are a small sample: which characters fall at positions
64-255 of those windows moves every scheme's loss alike. This script trains the same ten models
with the chapter's settings and scores all 76 windows of 256 characters, per position, so the
chapter can show the numbers the small sample estimates. It also records the first-16-window
numbers, which the chapter recomputes and compares, to show that its models are these.

The JSON's ``sha256`` is that of its ``results`` (``json.dumps(results, sort_keys=True)``);
the chapter refuses a file whose results do not match it.

    OMP_NUM_THREADS=1 python scripts/score_position_schemes.py          # writes data/
    python scripts/score_position_schemes.py --output /tmp/schemes.json  # elsewhere
"""

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnbook import (
    CharVocabulary,
    TinyDecoder,
    load_genesis,
    sequential_batches,
    set_seed,
    train_language_model,
    train_validation_split,
)

OUTPUT = Path(__file__).resolve().parent.parent / "data" / "position_schemes.json"
SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "none")
SEEDS = (0, 1)
SIZES = {"d_model": 32, "n_heads": 4, "n_layers": 2, "max_len": 256}
BUDGET = {"steps": 80, "batch_size": 8, "block_size": 64, "lr": 1e-2}
WINDOW, CHAPTER_WINDOWS = 256, 16
INSIDE, BEYOND = (32, 64), (64, 256)  # positions 32-63 and 64-255


def results_sha256(results: dict) -> str:
    """The sha256 of ``results`` as canonical JSON: what the file's ``sha256`` names."""
    return hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()


def loss_per_window_and_position(model, validation_ids) -> torch.Tensor:
    """(N_b, T): the next-character loss at every position of every 256-character window."""
    inputs, targets = sequential_batches(validation_ids, WINDOW)  # (N_b, T) each
    with torch.no_grad():
        logits = model.eval()(inputs)  # (N_b, T, V)
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


def summary(loss: torch.Tensor) -> dict:
    """Mean loss at positions 32-63 and 64-255 of the windows in ``loss`` (N_b, T)."""
    per_position = loss.mean(dim=0)  # (T,)
    return {
        "inside": per_position[slice(*INSIDE)].mean().item(),
        "beyond": per_position[slice(*BEYOND)].mean().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the chapter trains them
    text = load_genesis()
    vocab = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocab.encode(text), 0.1)
    start = time.perf_counter()
    results = {}
    for scheme in SCHEMES:
        for seed in SEEDS:
            set_seed(seed)
            model = TinyDecoder(len(vocab), positions=scheme, **SIZES)
            train_language_model(
                model,
                train_ids,
                validation_ids,
                **BUDGET,
                eval_every=BUDGET["steps"],
                eval_blocks=1,
                seed=seed,
            )
            loss = loss_per_window_and_position(model, validation_ids)  # (N_b, T)
            results[f"{scheme}/{seed}"] = {
                "all_windows": summary(loss),
                "first_16_windows": summary(loss[:CHAPTER_WINDOWS]),
            }
            print(scheme, seed, results[f"{scheme}/{seed}"], file=sys.stderr)
    output = {
        "what": "mean validation loss (nats per character) at positions 32-63 ('inside') and "
        "64-255 ('beyond') of 256-character windows, per scheme/seed",
        "command": "OMP_NUM_THREADS=1 python scripts/score_position_schemes.py",
        "model": SIZES,
        "training": BUDGET,
        "validation_windows": {
            "all": (validation_ids.numel() - 1) // WINDOW,
            "chapter": CHAPTER_WINDOWS,
            "length": WINDOW,
        },
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - start, 1),
        "results": results,
        "sha256": results_sha256(results),
    }
    args.output.write_text(json.dumps(output, indent=1) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
