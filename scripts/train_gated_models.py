"""Train chapter 15's two attention-only models, without and with an output gate.

Both are ``attnbook.models.gated_models.build_model``: chapter 14's attention-only
``TinyDecoder`` (2 layers x 4 heads, D = 64, no MLP, learned positions, vocabulary 64 + BOS,
context 33), the second with ``output_gate=True``. Both train with chapter 14's recipe
(``scripts/train_circuit_models.py``, run ``random``): from seed 0, on
``attnbook.periodic_batch`` sequences (BOS, then a random block of period 4 to 24 repeated),
AdamW at learning rate 3e-3, batch 64, 600 steps, one CPU thread; so the plain model is that
run. Every 20 steps the script records ``sink_metrics`` on 256 fixed BOS + r(16) + r(16)
sequences; the curves go into the manifest. About a minute per model on a shared 2-core machine.

    python scripts/train_gated_models.py                                  # writes data/
    python scripts/train_gated_models.py --steps 20 --output /tmp/gated   # a smoke run
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

from attnbook.models.gated_models import (
    CONFIG,
    MANIFEST,
    VARIANTS,
    WEIGHTS,
    build_model,
    evaluation_batch,
    sink_metrics,
    training_batch,
)
from attnbook.models.shipped import write_shipped

DATA = Path(__file__).resolve().parent.parent / "data"
TRAINING = {"steps": 600, "batch_size": 64, "lr": 3e-3, "weight_decay": 0.0, "seed": 0}
EVAL_EVERY = 20


def train(output_gate: bool, steps: int) -> tuple[dict, dict]:
    """Train one model from seed 0; return its state dict and its metric curves."""
    torch.manual_seed(TRAINING["seed"])
    model = build_model(output_gate)
    generator = torch.Generator().manual_seed(TRAINING["seed"])
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=TRAINING["lr"], weight_decay=TRAINING["weight_decay"]
    )
    evaluation = evaluation_batch()
    curves = {"step": []}
    for step in range(steps + 1):
        if step % EVAL_EVERY == 0 or step == steps:
            model.eval()
            curves["step"].append(step)
            for name, value in sink_metrics(model, evaluation).items():
                curves.setdefault(name, []).append(round(value, 5))
            model.train()
        if step == steps:
            break
        tokens = training_batch(TRAINING["batch_size"], generator)  # (B, 33)
        logits = model(tokens)  # (B, 33, V)
        loss = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model.state_dict(), curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAINING["steps"])
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    torch.set_num_threads(1)
    states, curves, seconds = {}, {}, {}
    for name, output_gate in VARIANTS.items():
        start = time.perf_counter()
        states[name], curves[name] = train(output_gate, args.steps)
        seconds[name] = round(time.perf_counter() - start, 1)
        final = {key: values[-1] for key, values in curves[name].items()}
        print(f"{name}: {final} in {seconds[name]} s")
    manifest = {
        "made_by": " ".join(["python scripts/train_gated_models.py", *sys.argv[1:]]),
        "config": CONFIG,
        "training": dict(TRAINING, steps=args.steps, optimiser="AdamW", eval_every=EVAL_EVERY),
        "data": "training_batch: BOS + a random block of period 4..24 repeated (periodic_batch)",
        "evaluation": "256 sequences BOS + r(16) + r(16), evaluation_batch(seed=1234)",
        "curves": curves,
        "torch_version": torch.__version__,
        "threads": 1,
        "training_seconds": seconds,
    }
    size = write_shipped(args.output, WEIGHTS, states, MANIFEST, manifest)
    print(f"wrote {args.output / WEIGHTS} ({size:,} bytes)")


if __name__ == "__main__":
    main()
