"""Prune the reference model's heads in many random orders; write the curves to data/.

Chapter 13 (book/13_trained_heads.ipynb, section "Pruning heads at test time") compares
pruning orders with 8 random orders, seeds 0 to 7, live. A rank among 9 is a weak test, so
this script runs the same computation for seeds 0 to 107: for each seed a random order of
the 32 heads (``torch.randperm`` with a ``torch.Generator`` seeded with it, as the chapter
draws them), and ``analysis.pruning_curve`` on the chapter's 12 held-out windows (the 12
validation windows after the 8 that scored the heads). Each curve is the mean loss over the
12 windows with 0, 1, ..., 32 heads removed. The chapter checks that seeds 0 to 7 match its
live curves and ranks its orders among all 108.

    OMP_NUM_THREADS=1 python scripts/prune_random_orders.py                 # writes data/
    python scripts/prune_random_orders.py --seeds 3 --output /tmp/orders.json  # a smoke run
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from attnbook import (
    load_genesis,
    load_reference_model,
    sequential_batches,
    train_validation_split,
)
from attnbook.analysis import head_analysis as analysis

OUTPUT = Path(__file__).resolve().parent.parent / "data" / "pruning_random_orders.json"
SCORED_WINDOWS, HELD_OUT_WINDOWS = 8, 12
VALIDATION_FRACTION = 0.1


def held_out_windows(vocabulary, block: int):
    """The chapter's held-out windows and targets, (12, T) each."""
    ids = vocabulary.encode(load_genesis())
    _, validation_ids = train_validation_split(ids, VALIDATION_FRACTION)
    total = SCORED_WINDOWS + HELD_OUT_WINDOWS
    windows, targets = sequential_batches(validation_ids, block, total)  # (20, T) each
    return windows[SCORED_WINDOWS:], targets[SCORED_WINDOWS:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=108, help="seeds 0 .. N - 1")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    reference = load_reference_model("cpu")
    model = reference.model
    config = reference.manifest["config"]
    n_layers, n_heads = config["n_layers"], config["n_heads"]
    held_out, held_out_targets = held_out_windows(reference.vocabulary, config["max_len"])
    start = time.perf_counter()
    curves = []
    for seed in range(args.seeds):
        generator = torch.Generator().manual_seed(seed)
        permutation = torch.randperm(n_layers * n_heads, generator=generator)
        order = [divmod(i, n_heads) for i in permutation.tolist()]
        curve = analysis.pruning_curve(model, held_out, held_out_targets, order)
        curves.append([round(loss, 5) for loss in curve])
        print(f"seed {seed}: mean over the curve {sum(curve) / len(curve):.4f}", flush=True)
    seconds = time.perf_counter() - start
    record = {
        "description": (
            "mean loss (nats per character) over the 12 held-out validation windows after "
            "removing 0, 1, ..., 32 heads of the reference model in a random order; "
            "curves[s] is seed s's"
        ),
        "windows": {
            "validation_fraction": VALIDATION_FRACTION,
            "first": SCORED_WINDOWS,
            "count": HELD_OUT_WINDOWS,
        },
        "seeds": list(range(args.seeds)),
        "curves": curves,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "seconds": round(seconds, 1),
        "command": " ".join(["python", *sys.argv]),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {args.output} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
