"""Train the book's reference model and write data/reference_model.pt and its manifest.

A character-level TinyDecoder (multi-head attention, D = 128, 8 heads, 4 layers, context 128)
trained on the first 90 % of Genesis with AdamW, linear warm-up then cosine decay, gradient
clipping, seeded batches. On the CPU with the default 2 threads it takes about 8 minutes on an
idle 2-core machine (100 steps in 30 s), several times that when other work shares the cores.
The same command with the same thread count and torch version reproduces the manifest's
validation loss and the weights bit for bit (checked: same sha256); a different thread count
changes the sums' order and so the last digits.

    python scripts/train_reference_model.py            # writes data/
    python scripts/train_reference_model.py --steps 20 --output /tmp/ref   # a smoke run
"""

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from attnbook import (
    CharVocabulary,
    evaluate_loss,
    load_genesis,
    next_token_loss,
    random_batch,
    train_validation_split,
)
from attnbook.models.reference_model import MANIFEST, WEIGHTS, build_reference_decoder
from attnbook.models.shipped import write_shipped

DATA = Path(__file__).resolve().parent.parent / "data"
MODEL = {"d_model": 128, "n_heads": 8, "n_layers": 4, "max_len": 128}
OPTIMISER = {
    "name": "AdamW",
    "peak_lr": 2e-3,
    "final_lr": 1e-4,
    "warmup_steps": 100,
    "weight_decay": 0.1,
    "betas": [0.9, 0.95],
    "clip_grad_norm": 1.0,
}
VALIDATION = {"fraction": 0.1, "block_size": 128, "max_blocks": 128}


def learning_rate(step: int, steps: int) -> float:
    """Linear warm-up to the peak, then cosine decay to the final rate at the last step."""
    peak, final, warmup = OPTIMISER["peak_lr"], OPTIMISER["final_lr"], OPTIMISER["warmup_steps"]
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return final + 0.5 * (peak - final) * (1 + math.cos(math.pi * progress))


def train(steps: int, batch_size: int, seed: int, eval_every: int) -> tuple:
    text = load_genesis()
    vocabulary = CharVocabulary(text)
    train_ids, validation_ids = train_validation_split(
        vocabulary.encode(text), VALIDATION["fraction"]
    )
    torch.manual_seed(seed)
    model = build_reference_decoder({"vocab_size": len(vocabulary), **MODEL})
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=OPTIMISER["peak_lr"],
        betas=tuple(OPTIMISER["betas"]),
        weight_decay=OPTIMISER["weight_decay"],
    )
    generator = torch.Generator().manual_seed(seed)
    block, blocks = VALIDATION["block_size"], VALIDATION["max_blocks"]
    curve = {
        "steps": [0],
        "validation_loss": [evaluate_loss(model, validation_ids, block, max_blocks=blocks)],
    }
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps)
        inputs, targets = random_batch(train_ids, batch_size, MODEL["max_len"], generator)
        loss = next_token_loss(model, inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIMISER["clip_grad_norm"])
        optimizer.step()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            curve["steps"].append(step + 1)
            curve["validation_loss"].append(
                evaluate_loss(model, validation_ids, block, max_blocks=blocks)
            )
            model.train()
            validation_loss = curve["validation_loss"][-1]
            print(f"step {step + 1:5d}  train {loss.item():.3f}  val {validation_loss:.4f}")
    return model.eval(), vocabulary, curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, vocabulary, curve = train(args.steps, args.batch_size, args.seed, args.eval_every)
    seconds = time.perf_counter() - start
    manifest = {
        "made_by": " ".join(["python scripts/train_reference_model.py", *sys.argv[1:]]),
        "config": {"vocab_size": len(vocabulary), **MODEL},
        "characters": "".join(vocabulary.characters),
        "data": "data/genesis_kjv.txt, first 90 % for training, last 10 % for validation",
        "seed": args.seed,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "optimiser": OPTIMISER,
        "validation": VALIDATION,
        "validation_loss": curve["validation_loss"][-1],
        "curve": curve,
        "torch_version": torch.__version__,
        "threads": args.threads,
        "training_seconds": round(seconds, 1),
    }
    size = write_shipped(args.output, WEIGHTS, model.state_dict(), MANIFEST, manifest)
    print(f"wrote {args.output / WEIGHTS} ({size:,} bytes) in {seconds:.0f} s")


if __name__ == "__main__":
    main()
