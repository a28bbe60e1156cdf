"""Train chapter 12's GQA, MQA and MLA tiny GPTs with two more seeds; write their histories.

The shipped models (``data/capstone_models.pt``, from ``scripts/train_capstone_models.py``) are
seed 0; MHA's seeds 1 and 2 are in ``data/head_count_comparison.json`` (its 4-head model is
the capstone's MHA model, and its seed 0 is the shipped run). This script trains the other three
variants with seeds 1 and 2, each seed fixing both the initial weights and the batch order, with
``attnbook.models.capstone.train_capstone_model`` (one CPU thread, 400 steps, the validation loss
every 25 steps), and writes only their validation histories to ``data/capstone_seeds.json``: no
weights. About 25 s per run on a 2-core machine; ``--jobs`` runs that many at once, each on one
thread, in separate processes (the same losses: every run is single-threaded and seeded).

``--variants``, ``--seeds`` and ``--steps`` choose other runs. Exercise 2's answer,
``data/capstone_longer.json``, is MHA and MQA trained for 1,500 steps with seeds 0, 1 and 2.
``--lr`` trains every run at each of the given learning rates and writes only the final
validation losses, {rate: {variant: {seed: loss}}}: ``data/capstone_lr_sweep.json``.

    OMP_NUM_THREADS=1 python scripts/train_capstone_seeds.py                 # writes data/
    OMP_NUM_THREADS=1 python scripts/train_capstone_seeds.py --jobs 6        # the same, in parallel
    python scripts/train_capstone_seeds.py --steps 5 --output /tmp/seeds.json  # a smoke run
    OMP_NUM_THREADS=1 python scripts/train_capstone_seeds.py --variants MHA MQA --seeds 0 1 2 \
        --steps 1500 --output data/capstone_longer.json                       # exercise 2
    OMP_NUM_THREADS=1 python scripts/train_capstone_seeds.py --variants MHA MLA --seeds 0 1 2 \
        --lr 1.5e-3 6e-3 --output data/capstone_lr_sweep.json                 # the rate sweep
"""

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch

from attnbook import CharVocabulary, load_genesis, train_validation_split
from attnbook.models.capstone import (
    SEED_HISTORIES,
    VALIDATION_FRACTION,
    VARIANTS,
    seed_run_record,
    seeds_config,
    train_capstone_model,
)
from attnbook.models.shipped import write_run_record

OUTPUT = Path(__file__).resolve().parent.parent / "data" / SEED_HISTORIES
SEEDED = ("GQA", "MQA", "MLA")  # the variants data/capstone_seeds.json holds
SEEDS = (1, 2)
TIMEOUT_SECONDS = 3600  # for one run, however busy the machine


def train_one(name: str, seed: int, steps: int | None, lr: float | None) -> dict:
    """One variant trained with one seed (and rate): its validation history and its time."""
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocabulary.encode(text), VALIDATION_FRACTION)
    start = time.perf_counter()
    _, history = train_capstone_model(
        name, len(vocabulary), train_ids, validation_ids, steps=steps, seed=seed, lr=lr
    )
    return {**asdict(history), "training_seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="default: the capstone's 400")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(SEEDED))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    parser.add_argument("--lr", type=float, nargs="+", default=None, help="a learning-rate sweep")
    args = parser.parse_args()
    rates = [None] if args.lr is None else args.lr
    runs = [(name, seed, lr) for lr in rates for name in args.variants for seed in args.seeds]
    start = time.perf_counter()
    # AdamW's first construction imports much of torch (seconds): once here, before the fork
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            (name, seed, lr): pool.submit(train_one, name, seed, args.steps, lr)
            for name, seed, lr in runs
        }
        results = {run: future.result(timeout=TIMEOUT_SECONDS) for run, future in futures.items()}
    seconds = time.perf_counter() - start
    for (name, seed, lr), result in results.items():
        rate = "" if lr is None else f" lr {lr:g}"
        print(f"{name} seed {seed}{rate}: validation loss {result['validation_losses'][-1]:.4f}")
    config = seeds_config(len(CharVocabulary(load_genesis())))
    made_by = " ".join(["python scripts/train_capstone_seeds.py", *sys.argv[1:]])
    result = {**seed_run_record(made_by, config, args.seeds, args.steps), "variants": args.variants}
    if args.lr is None:
        result["histories"] = {
            name: {str(seed): results[name, seed, None] for seed in args.seeds}
            for name in args.variants
        }
    else:
        training = result["config"]["training"]
        result["config"]["training"] = {key: v for key, v in training.items() if key != "lr"}
        result["learning_rates"] = args.lr
        result["final_validation_losses"] = {
            f"{lr:g}": {
                name: {
                    str(seed): results[name, seed, lr]["validation_losses"][-1]
                    for seed in args.seeds
                }
                for name in args.variants
            }
            for lr in args.lr
        }
        result["run_seconds"] = {
            f"{lr:g} {name} {seed}": results[name, seed, lr]["training_seconds"]
            for name, seed, lr in runs
        }
    write_run_record(args.output, result, threads=1, seconds=seconds)


if __name__ == "__main__":
    main()
