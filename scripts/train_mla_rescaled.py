"""Train chapter 12's MLA tiny GPT with its up-projections scaled by sqrt(3) at initialisation.

Chapter 12 measures that MLA's keys and values start at about 0.32 of the LayerNorm'd input's
scale, against 0.58 for MHA and MQA: they come out of two default-initialised ``nn.Linear``
layers in a row (``kv_down``, then ``k_up`` or ``v_up``), each scaling by about 1 / sqrt(3).
This script tests whether that initial scale explains part of MLA's lag: it builds MLA with
``attnbook.models.capstone.build_capstone_model("MLA", V, seed=s)`` for seeds 0, 1 and 2,
multiplies every layer's ``k_up.weight`` and ``v_up.weight`` by ``--factor`` (default
sqrt(3), which brings the keys and values to one layer's scale), and trains it exactly as the
shipped MLA runs were trained: ``train_language_model`` with ``capstone.TRAINING`` and the
run's seed (batch order), on one CPU thread. A control run with factor 1.0
and seed 0 must repeat the shipped MLA history (``data/capstone_models.json``) within 1e-5
at every point (a CPU with other vector instructions may round differently); the script
stops if it does not, and records the largest difference and whether the final loss is the
same float. It writes the histories, not weights, to ``data/mla_rescaled.json``. About 10 to
25 s per run on one thread; ``--jobs`` runs that many at once, in separate processes.

    OMP_NUM_THREADS=1 python scripts/train_mla_rescaled.py --jobs 2               # writes data/
    python scripts/train_mla_rescaled.py --steps 5 --output /tmp/rescaled.json    # a smoke run
"""

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch

from attnbook import CharVocabulary, load_genesis, train_validation_split
from attnbook.models.capstone import (
    MLA_RESCALED,
    VALIDATION_FRACTION,
    build_capstone_model,
    fit_capstone_model,
    load_capstone_models,
    mla_rescaled_config,
    scale_mla_up_projections,
    seed_run_record,
)
from attnbook.models.shipped import write_run_record

OUTPUT = Path(__file__).resolve().parent.parent / "data" / MLA_RESCALED
SEEDS = (0, 1, 2)
TIMEOUT_SECONDS = 3600  # for one run, however busy the machine


def train_one(seed: int, factor: float, steps: int | None) -> dict:
    """MLA built with ``seed``, its k_up and v_up weights times ``factor``, then trained."""
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(vocabulary.encode(text), VALIDATION_FRACTION)
    model = build_capstone_model("MLA", len(vocabulary), seed=seed)
    scale_mla_up_projections(model, factor)
    start = time.perf_counter()
    history = fit_capstone_model(model, train_ids, validation_ids, steps=steps, seed=seed)
    return {**asdict(history), "training_seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factor", type=float, default=math.sqrt(3))
    parser.add_argument("--steps", type=int, default=None, help="default: the capstone's 400")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    args = parser.parse_args()
    runs = [(seed, args.factor) for seed in args.seeds] + [(0, 1.0)]  # the last: the control
    start = time.perf_counter()
    # AdamW's first construction imports much of torch (seconds): once here, before the fork
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {run: pool.submit(train_one, *run, args.steps) for run in runs}
        results = {run: future.result(timeout=TIMEOUT_SECONDS) for run, future in futures.items()}
    seconds = time.perf_counter() - start
    control = results[0, 1.0]
    shipped = load_capstone_models("cpu").histories["MLA"]
    pairs = list(zip(control["validation_losses"], shipped.validation_losses, strict=False))
    largest_difference = max(abs(live - recorded) for live, recorded in pairs)
    same_final = control["validation_losses"][-1] == shipped.validation_losses[-1]
    if args.steps is None and largest_difference > 1e-5:
        sys.exit(f"the control run (factor 1.0, seed 0) is {largest_difference} off shipped MLA")
    print(f"control, factor 1.0, seed 0: {largest_difference:.2g} at most from the shipped MLA")
    print(f"the same final loss as the shipped MLA: {same_final}")
    histories = {str(seed): results[seed, args.factor] for seed in args.seeds}
    for seed, result in histories.items():
        print(f"MLA x {args.factor:.4f}, seed {seed}: {result['validation_losses'][-1]:.5f}")
    config = mla_rescaled_config(len(CharVocabulary(load_genesis())), args.factor)
    made_by = " ".join(["python scripts/train_mla_rescaled.py", *sys.argv[1:]])
    result = {
        **seed_run_record(made_by, config, args.seeds, args.steps),
        "histories": histories,
        "control": {
            "factor": 1.0,
            "seed": 0,
            "validation_losses": control["validation_losses"],
            "largest_difference_from_shipped_mla": largest_difference,
            "same_final_loss_as_shipped_mla": same_final,
        },
    }
    write_run_record(args.output, result, threads=1, seconds=seconds)


if __name__ == "__main__":
    main()
