"""Train chapter 1's two encoder-decoders and write data/reversal_models.pt and its manifest.

The plain (RNNencdec-like) and the attention (RNNsearch-like) model of
``book/01_bahdanau.ipynb``, both from ``attnbook.models.seq2seq_training.train_reversal_model``:
E = 16, D = 32, the same starting weights for every shared part, the same 300 batches of 64
words of 3 to 20 letters, Adam at 1e-2 falling linearly to 0, gradients clipped at norm 1.
Training runs on one CPU thread, so the same torch version on the same kind of CPU reproduces
the weights and losses exactly (the chapter retrains the first steps live and checks this).
About 30 s on a 2-core machine.

    python scripts/train_reversal_models.py                        # writes data/
    python scripts/train_reversal_models.py --output /tmp/reversal  # somewhere else
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from attnbook.models.seq2seq_training import (
    REVERSAL_CONFIG,
    REVERSAL_MANIFEST,
    REVERSAL_VARIANTS,
    REVERSAL_WEIGHTS,
    train_reversal_model,
)
from attnbook.models.shipped import write_shipped

DATA = Path(__file__).resolve().parent.parent / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args()
    torch.set_num_threads(1)
    states, losses, seconds = {}, {}, {}
    for name in REVERSAL_VARIANTS:
        start = time.perf_counter()
        model, losses[name] = train_reversal_model(attention=name == "attention")
        seconds[name] = round(time.perf_counter() - start, 1)
        states[name] = model.state_dict()
        final = sum(losses[name][-20:]) / 20
        print(f"{name}: loss {losses[name][0]:.3f} -> {final:.4f} in {seconds[name]} s")
    manifest = {
        "made_by": " ".join(["python scripts/train_reversal_models.py", *sys.argv[1:]]),
        "config": REVERSAL_CONFIG,
        "task": "reverse random lowercase words (attnbook.reversal_batch), then </s>",
        "optimiser": "Adam, learning rate falling linearly to 0, gradients clipped",
        "final_loss_last_20_steps": {
            name: sum(history[-20:]) / 20 for name, history in losses.items()
        },
        "losses": losses,
        "training_seconds": seconds,
        "torch_version": torch.__version__,
        "threads": 1,
    }
    size = write_shipped(args.output, REVERSAL_WEIGHTS, states, REVERSAL_MANIFEST, manifest)
    print(f"wrote {args.output / REVERSAL_WEIGHTS} ({size:,} bytes)")


if __name__ == "__main__":
    main()
