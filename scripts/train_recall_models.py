"""Train chapter 18's recall models: softmax, linear, Gated DeltaNet and a 3:1 hybrid on MQAR.

Every run is a 4-layer ``attnbook.TinyDecoder`` (D = 32, 4 heads of 8, learned positions, MLP
width 128) built
by ``attnbook.models.recall.build_recall_model`` with one layer pattern: ``AAAA`` (softmax
attention), ``LLLL`` (linear attention), ``GGGG`` (Gated DeltaNet) or ``GGGA`` (three Gated
DeltaNet layers, then attention): a linear layer keeps 4 x 8 x 8 = 256 numbers per sequence
whatever its length. Each run: AdamW at 5e-3 (20 warm-up steps, then cosine to 10 %), 200
batches of 32 MQAR sequences whose number of pairs is drawn from 2..16 per batch, seeds 0 and
1, one CPU thread per run and two runs at a time (sized for a shared 2-core machine).
Accuracy is measured on 128 fixed sequences for each of 2, 4, 8, 12 and 16 pairs (seed 1234).

    python scripts/train_recall_models.py                                # writes data/
    python scripts/train_recall_models.py --steps 5 --output /tmp/recall # a smoke run
"""

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from torch import nn

from attnbook.models.recall import (
    IGNORE,
    MANIFEST,
    WEIGHTS,
    build_recall_model,
    mqar_batch,
    recall_accuracy,
    state_floats,
)
from attnbook.models.shipped import write_shipped

DATA = Path(__file__).resolve().parent.parent / "data"
CONFIG = {"d_model": 32, "n_heads": 4, "n_layers": 4, "max_len": 64}
RUNS = {"softmax": "AAAA", "linear": "LLLL", "gated_deltanet": "GGGG", "hybrid": "GGGA"}
SEEDS = (0, 1)
TRAINING = {"steps": 200, "batch_size": 32, "lr": 5e-3, "warmup": 20, "pairs": [2, 16]}
EVAL_PAIRS = (2, 4, 8, 12, 16)
EVAL_SEED, EVAL_SIZE = 1234, 128
TIMEOUT_S = 3600


def learning_rate(step: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of the peak."""
    peak, warmup = TRAINING["lr"], TRAINING["warmup"]
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def evaluate(model) -> dict[str, float]:
    generator = torch.Generator().manual_seed(EVAL_SEED)
    model.eval()
    accuracy = {}
    for pairs in EVAL_PAIRS:
        tokens, targets = mqar_batch(EVAL_SIZE, pairs, generator)
        accuracy[str(pairs)] = round(recall_accuracy(model, tokens, targets), 4)
    return accuracy


def train(job: tuple[str, int, int]) -> tuple[str, dict, dict]:
    """Train one run from its seed; return its key, state dict and record for the manifest."""
    name, seed, steps = job
    torch.set_num_threads(1)
    pattern = RUNS[name]
    torch.manual_seed(seed)
    model = build_recall_model(CONFIG, pattern)
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=TRAINING["lr"])
    low, high = TRAINING["pairs"]
    start = time.perf_counter()
    losses = []
    for step in range(steps):
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(step, steps)
        pairs = int(torch.randint(low, high + 1, (1,), generator=generator))
        tokens, targets = mqar_batch(TRAINING["batch_size"], pairs, generator)
        logits = model(tokens)  # (B, T, V)
        loss = nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE
        )
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    record = {
        "layer_pattern": pattern,
        "config": CONFIG,
        "seed": seed,
        "state_floats": state_floats(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "accuracy": evaluate(model),
        "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "training_seconds": round(time.perf_counter() - start, 1),
    }
    key = f"{name}_seed{seed}"
    print(f"{key}: {record['accuracy']} in {record['training_seconds']} s", flush=True)
    return key, model.state_dict(), record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAINING["steps"])
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    jobs = [(name, seed, args.steps) for name in RUNS for seed in SEEDS]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(train, jobs, timeout=TIMEOUT_S))
    states = {key: state for key, state, _ in results}
    runs = {key: record for key, _, record in results}
    manifest = {
        "made_by": "python scripts/train_recall_models.py",
        "task": (
            "MQAR (attnbook.models.recall.mqar_batch): P key-value pairs, then every key again "
            "in a random order followed by its value; accuracy at the queries"
        ),
        "training": {**TRAINING, "steps": args.steps, "optimiser": "AdamW", "seeds": SEEDS},
        "evaluation": f"{EVAL_SIZE} sequences per pair count {EVAL_PAIRS}, seed {EVAL_SEED}",
        "runs": runs,
        "torch_version": torch.__version__,
        "threads_per_run": 1,
        "wall_seconds": round(time.perf_counter() - start, 1),
    }
    size = write_shipped(args.output, WEIGHTS, states, MANIFEST, manifest)
    print(f"wrote {args.output / WEIGHTS} ({size} bytes) in {manifest['wall_seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
