"""Train chapter 14's attention-only models and write data/circuit_models.pt and its manifest.

Four runs of the same 2-layer, 4-head, D = 64 attention-only ``TinyDecoder``
(``attnbook.analysis.circuits.build_circuit_model``), each 600 AdamW steps (learning rate 3e-3, no
weight decay) of 64 sequences of 33 tokens from ``attnbook.analysis.circuits.periodic_batch``:

- ``random``: BOS, then a random block of period P in [4, 24] (drawn per sequence) repeated;
- ``random_seed1``: the same with seed 1 (curves only: is the step of the cliff a fluke?);
- ``fixed``: BOS, then a block of period 16 repeated twice (always the same period);
- ``no_bos``: a random first token instead of BOS, periods as in ``random``.

Every 10 steps each run is measured on 256 fixed sequences first token + r(16) + r(16)
(``circuit_measurements``: the loss on the first and the repeated block, and per head the
previous-token, induction and sink scores); the manifest keeps these curves. Weights are
shipped, in float16, for ``random`` at the steps in ``SNAPSHOTS`` and for ``fixed`` at the
end. One CPU thread, so the same torch on the same kind of CPU gives the same numbers. About
a minute per run on a lightly loaded 2-core machine.

    python scripts/train_circuit_models.py                          # writes data/
    python scripts/train_circuit_models.py --steps 20 --output /tmp/circuits   # a smoke run
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnbook.analysis.circuits import (
    MANIFEST,
    MODEL_CONFIG,
    WEIGHTS,
    build_circuit_model,
    circuit_measurements,
    periodic_batch,
)
from attnbook.models.shipped import write_shipped

DATA = Path(__file__).resolve().parent.parent / "data"
RUNS = {  # name: (seed, shortest period, longest period, BOS first)
    "random": (0, 4, 24, True),
    "random_seed1": (1, 4, 24, True),
    "fixed": (0, 16, 16, True),
    "no_bos": (0, 4, 24, False),
}
TRAINING = {"steps": 600, "batch_size": 64, "lr": 3e-3, "weight_decay": 0.0}
EVALUATION = {"sequences": 256, "period": 16, "seed": 1234, "every": 10}
SNAPSHOTS = [0, 100, 150, 200, 300, 600]


def measure(model, tokens) -> dict:
    """The measurements of one evaluation, as plain numbers (rounded) for the manifest."""
    model.eval()
    found = circuit_measurements(model, tokens, EVALUATION["period"])
    model.train()
    rounded = {}
    for key, value in found.items():
        if isinstance(value, float):
            rounded[key] = round(value, 3)
        else:  # (L, H) scores: nested lists of Python floats, 3 decimals
            rounded[key] = [[round(float(x), 3) for x in row] for row in value]
    return rounded


def train_run(name: str, steps: int, snapshots: list[int]) -> tuple[dict, dict]:
    """One run: its curves (a dict of lists, one entry per evaluation) and its snapshots."""
    seed, shortest, longest, bos = RUNS[name]
    torch.manual_seed(seed)
    model = build_circuit_model()
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=TRAINING["lr"], weight_decay=TRAINING["weight_decay"]
    )
    data = torch.Generator().manual_seed(seed)
    periods = torch.full((EVALUATION["sequences"],), EVALUATION["period"])
    evaluation = periodic_batch(
        periods, torch.Generator().manual_seed(EVALUATION["seed"]), bos=bos
    )  # (256, 33)
    curves, states = {"steps": []}, {}
    for step in range(steps + 1):
        if step % EVALUATION["every"] == 0 or step == steps:
            curves["steps"].append(step)
            for key, value in measure(model, evaluation).items():
                curves.setdefault(key, []).append(value)
        if step in snapshots:
            states[f"{name}/{step}"] = {k: v.half() for k, v in model.state_dict().items()}
        if step == steps:
            break
        batch_periods = torch.randint(
            shortest, longest + 1, (TRAINING["batch_size"],), generator=data
        )
        tokens = periodic_batch(batch_periods, data, bos=bos)  # (B, 33)
        logits = model(tokens)  # (B, 33, V)
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return curves, states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAINING["steps"])
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    curves, states, seconds = {}, {}, {}
    for name in RUNS:
        run_start = time.perf_counter()
        wanted = [s for s in SNAPSHOTS if s <= args.steps] if name == "random" else []
        if name == "fixed":
            wanted = [args.steps]
        curves[name], run_states = train_run(name, args.steps, wanted)
        states.update(run_states)
        seconds[name] = round(time.perf_counter() - run_start, 1)
        last = {k: v[-1] for k, v in curves[name].items() if k.startswith("loss")}
        print(f"{name}: {last} in {seconds[name]} s", flush=True)
    manifest = {
        "made_by": " ".join(["python", "scripts/train_circuit_models.py", *sys.argv[1:]]),
        "config": MODEL_CONFIG,
        "runs": {
            name: dict(zip(("seed", "shortest_period", "longest_period", "bos"), run, strict=True))
            for name, run in RUNS.items()
        },
        "training": {**TRAINING, "steps": args.steps, "optimiser": "AdamW, constant lr"},
        "evaluation": EVALUATION,
        "snapshots": sorted(states),
        "weights_dtype": "float16",
        "torch": torch.__version__,
        "threads": 1,
        "training_seconds": seconds,
        "curves": curves,
    }
    size = write_shipped(args.output, WEIGHTS, states, MANIFEST, manifest)
    total = time.perf_counter() - start
    print(f"wrote {args.output / WEIGHTS} ({size:,} bytes) and {MANIFEST} in {total:.0f} s")


if __name__ == "__main__":
    main()
