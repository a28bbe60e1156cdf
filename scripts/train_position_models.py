"""Train chapter 7's ten train-short-test-long models; write data/position_models.pt and manifest.

Five position schemes (learned, sinusoidal, rope, alibi, none) times two seeds of one
character-level TinyDecoder (``attnbook.models.position_models``: D = 64, 4 heads of width 16,
2 layers, 256-row tables), each trained on windows of 64 characters of the first 90 % of
Genesis (AdamW on 16 windows a step at learning rate 3e-3, one CPU thread per model: 700
steps, 3000 for the model without positions, which learns more slowly).
The weights are shipped in float16; the key metric, each model's validation loss at length 64
over the first 304 windows of the last 10 % (76 windows of 256), is measured on the float16
weights the chapter loads. ``--workers 2`` trains two models at a time in separate processes
(the weights do not depend on it).

    OMP_NUM_THREADS=1 python scripts/train_position_models.py --workers 2        # writes data/
    python scripts/train_position_models.py --steps 20 --output /tmp/positions   # a smoke run
"""

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch

from attnbook.models.lm_training import evaluate_loss
from attnbook.models.position_models import (
    KEY_BLOCKS,
    MANIFEST,
    SCHEMES,
    SEEDS,
    STEPS,
    TRAINING,
    WEIGHTS,
    build_position_model,
    model_key,
    position_models_config,
    train_position_model,
)
from attnbook.models.shipped import write_shipped
from attnbook.models.text import CharVocabulary, load_genesis, train_validation_split

DATA = Path(__file__).resolve().parent.parent / "data"
TIMEOUT_S = 1800  # per model: far above the ~2 min one takes on a shared 2-core machine


def split():
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocabulary.encode(text), 0.1)
    return vocabulary, train_ids, validation_ids


def train_one(scheme: str, seed: int, steps: int | None) -> tuple[dict, dict]:
    """Train one model; return its float16 state dict and its manifest entry."""
    torch.set_num_threads(1)
    vocabulary, train_ids, validation_ids = split()
    start = time.perf_counter()
    model, history = train_position_model(
        scheme, seed, len(vocabulary), train_ids, validation_ids, steps=steps
    )
    seconds = time.perf_counter() - start
    state = {name: value.half() for name, value in model.state_dict().items()}
    shipped = build_position_model(scheme, seed, len(vocabulary))
    shipped.load_state_dict({name: value.float() for name, value in state.items()})
    block = TRAINING["block_size"]
    entry = {
        "steps": history.steps,
        "validation_losses": [round(loss, 4) for loss in history.validation_losses],
        "final_training_loss": round(history.final_training_loss, 4),
        "validation_loss": evaluate_loss(shipped, validation_ids, block, max_blocks=KEY_BLOCKS),
        "seconds": round(seconds, 1),
    }
    print(f"{model_key(scheme, seed)}: {entry['validation_loss']:.4f} ({seconds:.0f} s)")
    sys.stdout.flush()
    return state, entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="every model's steps (default: STEPS)")
    parser.add_argument("--workers", type=int, choices=(1, 2), default=1)
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    vocabulary, _, _ = split()
    # the slowest first, so that two workers finish together
    jobs = sorted(
        ((scheme, seed) for scheme in SCHEMES for seed in SEEDS),
        key=lambda job: -STEPS[job[0]],
    )
    start = time.perf_counter()
    context = get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        futures = [pool.submit(train_one, *job, args.steps) for job in jobs]
        results = [future.result(timeout=TIMEOUT_S) for future in futures]
    by_job = dict(zip(jobs, results, strict=True))
    order = [(scheme, seed) for scheme in SCHEMES for seed in SEEDS]
    weights = {model_key(*job): by_job[job][0] for job in order}
    entries = {model_key(*job): by_job[job][1] for job in order}
    manifest = {
        "made_by": " ".join(
            ["OMP_NUM_THREADS=1 python scripts/train_position_models.py"] + sys.argv[1:]
        ),
        "config": position_models_config(len(vocabulary)),
        "characters": "".join(vocabulary.characters),
        "metric": (
            "validation_loss: mean next-character loss (nats per character) of the float16 "
            f"weights over the first {KEY_BLOCKS} windows of 64 characters of the last 10 %"
        ),
        "weights_dtype": "float16",
        "torch": torch.__version__,
        "threads": 1,
        "models": entries,
    }
    if args.steps is not None:
        manifest["config"]["steps"] = dict.fromkeys(SCHEMES, args.steps)
    size = write_shipped(args.output, WEIGHTS, weights, MANIFEST, manifest)
    total = time.perf_counter() - start
    print(f"wrote {args.output / WEIGHTS} ({size:,} bytes) and {MANIFEST} in {total:.0f} s")


if __name__ == "__main__":
    main()
