"""Train tiny decoders with 1, 2, 4 and 8 heads at a fixed width D; write the losses to data/.

For every head count H in (1, 2, 4, 8) and seed in (0, 1, 2) this trains a character-level
TinyDecoder on the first 90 % of Genesis with the capstone chapter's settings
(book/12_tiny_gpt.ipynb: D = 64, 2 layers, context 64, learned positions, MLP width 4 D,
400 AdamW steps of 32 windows at learning rate 3e-3) and records its validation loss on the
first 64 windows of the last 10 %. Only the split of D into heads changes: d_head = D / H, and
every H has the same parameter count (checked). A seed fixes both the initial weights and the
order of the batches, so the four head counts of one seed see the same batches.

Chapter 13 (book/13_trained_heads.ipynb) reads data/head_count_comparison.json. With one
thread (the default) the twelve runs took 332 seconds on a shared 2-core machine (the JSON's
``training_seconds``); the same command, thread count and torch version reproduce the losses.

    OMP_NUM_THREADS=1 python scripts/compare_head_counts.py                 # writes data/
    python scripts/compare_head_counts.py --steps 5 --output /tmp/heads.json  # a smoke run
    python scripts/compare_head_counts.py --seeds 0 1 2 3 4 --output /tmp/heads.json  # 5 seeds
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from attnbook import (
    CharVocabulary,
    TinyDecoder,
    load_genesis,
    set_seed,
    train_language_model,
    train_validation_split,
)
from attnbook.models.shipped import write_run_record

OUTPUT = Path(__file__).resolve().parent.parent / "data" / "head_count_comparison.json"
HEAD_COUNTS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)
MODEL = {"d_model": 64, "n_layers": 2, "max_len": 64}
TRAINING = {"batch_size": 32, "learning_rate": 3e-3, "eval_blocks": 64}
VALIDATION_FRACTION = 0.1


def count_parameters(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def train_one(n_heads: int, seed: int, steps: int, vocabulary, train_ids, validation_ids):
    """The final validation loss and parameter count of one (H, seed) run."""
    set_seed(seed)
    model = TinyDecoder(len(vocabulary), n_heads=n_heads, **MODEL)
    history = train_language_model(
        model,
        train_ids,
        validation_ids,
        steps=steps,
        batch_size=TRAINING["batch_size"],
        block_size=MODEL["max_len"],
        lr=TRAINING["learning_rate"],
        eval_every=steps,
        eval_blocks=TRAINING["eval_blocks"],
        seed=seed,
    )
    return history.validation_losses[-1], count_parameters(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocabulary.encode(text), VALIDATION_FRACTION)
    start = time.perf_counter()
    losses, parameters = {}, {}
    for n_heads in HEAD_COUNTS:
        losses[str(n_heads)] = []
        for seed in args.seeds:
            loss, parameters[str(n_heads)] = train_one(
                n_heads, seed, args.steps, vocabulary, train_ids, validation_ids
            )
            losses[str(n_heads)].append(loss)
            print(f"H = {n_heads}  seed {seed}  validation loss {loss:.4f}", flush=True)
    seconds = time.perf_counter() - start
    assert len(set(parameters.values())) == 1, f"parameter counts differ: {parameters}"
    result = {
        "made_by": " ".join(["python scripts/compare_head_counts.py", *sys.argv[1:]]),
        "config": {"vocab_size": len(vocabulary), **MODEL, "mlp_width": 4 * MODEL["d_model"]},
        "head_counts": list(HEAD_COUNTS),
        "seeds": args.seeds,
        "steps": args.steps,
        **TRAINING,
        "data": "data/genesis_kjv.txt, first 90 % for training, last 10 % for validation",
        "parameters": parameters,
        "validation_loss": losses,
    }
    write_run_record(args.output, result, threads=args.threads, seconds=seconds)


if __name__ == "__main__":
    main()
