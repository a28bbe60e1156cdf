"""Train chapter 19's dense, MoBA and indexer models; write data/sparse_models.pt and its manifest.

The task and model are chapter 14's (``attnbook.models.sparse_models``): BOS, then a block of
random period P in [4, 24] repeated to 32 tokens; a 2-layer, 4-head, D = 64 attention-only
``TinyDecoder``. For each seed:

- ``dense``: ``STEPS["dense"]`` AdamW steps (lr 3e-3) of causal attention;
- ``moba``: the same steps with MoBA (blocks of 2, top 2: at most 4 keys per query);
- ``indexer``: the dense model's weights (checked: in dense mode it scores exactly what the
  dense model scores), plus a lightning indexer per layer (2 heads of 16) warmed up for
  ``STEPS["warmup"]`` steps on the KL to the dense attention (everything else frozen, lr 1e-3),
  then ``STEPS["sparse"]`` steps of sparse training over each query's top 4 tokens (language
  loss + the indexer's KL on the chosen tokens, lr 1e-3). Before warm-up, the dense model
  reading the exact top 4 keys of its own attention (heads summed) gives the ceiling a perfect
  indexer could reach (``exact_top4``).

Measured on 128 fixed sequences (periods drawn from the same range, seed 1234): the share of
repeated tokens predicted exactly, and, for the indexer, the share of the dense attention's top
4 keys (heads summed) that it picks (recall), per layer, during and after warm-up. Weights are
shipped in float16. One CPU thread.

``--dense-control`` adds, to a manifest already written, the control the indexer's extra steps
call for: the shipped dense weights trained ``STEPS["sparse"]`` more steps exactly as the sparse
stage is (lr 1e-3, data seed + 200, a fresh AdamW), with the language loss only. It stores the
curve (``curves["dense_control"]``) and the final accuracy (``summary["dense_plus_sparse_steps"]``),
not the weights; the weights file and its sha256 stay as they are. ``--moba-from-dense`` does the
same with MoBA attention over the same dense weights (MoBA's recipe: continue a dense model), so
MoBA gets the indexer's warm start (``curves["moba_from_dense"]``, ``summary["moba_from_dense"]``).

    python scripts/train_sparse_models.py                                  # writes data/
    python scripts/train_sparse_models.py --dense-control                  # adds the control
    python scripts/train_sparse_models.py --moba-from-dense                # adds MoBA's
    python scripts/train_sparse_models.py --scale 0.05 --output /tmp/sparse  # a smoke run
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from attnbook.models.periodic import periodic_batch
from attnbook.models.shipped import check_sha256, read_state_dict, sha256_of, write_shipped
from attnbook.models.sparse_models import (
    KEYS,
    MANIFEST,
    MODEL_CONFIG,
    PERIODS,
    SELECTION,
    WEIGHTS,
    build_sparse_model,
    indexer_recall,
    load_dense_weights,
    next_token_loss,
    repeated_accuracy,
    set_mode,
    sparse_layers,
)

DATA = Path(__file__).resolve().parent.parent / "data"
SEEDS = (0, 1)
STEPS = {"dense": 250, "warmup": 300, "sparse": 80}
TRAINING = {"batch_size": 32, "lr": 3e-3, "indexer_lr": 1e-3, "weight_decay": 0.0}
EVERY = {"dense": 50, "warmup": 25, "sparse": 20}
# kind -> (the option, curve and manifest key; the summary key) of each control run
CONTROLS = {
    "dense": ("dense_control", "dense_plus_sparse_steps"),
    "moba": ("moba_from_dense", "moba_from_dense"),
}


def random_periods(batch: int, generator: torch.Generator) -> torch.Tensor:
    """(B,) periods uniform in PERIODS."""
    return torch.randint(PERIODS[0], PERIODS[1] + 1, (batch,), generator=generator)


def evaluation_batch(sequences: int = 128, seed: int = 1234):
    """Fixed sequences (B, 33) and their periods (B,), for every measurement."""
    generator = torch.Generator().manual_seed(seed)
    periods = random_periods(sequences, generator)  # (B,)
    return periodic_batch(periods, generator), periods


def _rounded(values) -> list[float]:
    return [round(float(v), 3) for v in values]


def language_loss(model, tokens):
    return next_token_loss(model, tokens)


def indexer_loss(model, tokens):
    model(tokens)
    return sum(layer.indexer_loss for layer in sparse_layers(model))


def sparse_loss(model, tokens):
    return next_token_loss(model, tokens) + sum(
        layer.indexer_loss for layer in sparse_layers(model)
    )


def train(model, steps: int, lr: float, seed: int, evaluate, every: int, loss_of=language_loss):
    """AdamW on the trainable parameters; returns the curve {"steps": [...], "metrics": [...]}."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(trainable, lr=lr, weight_decay=TRAINING["weight_decay"])
    data = torch.Generator().manual_seed(seed)
    curve = {"steps": [], "metrics": []}
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            model.eval()
            curve["steps"].append(step)
            curve["metrics"].append(evaluate(model))
            model.train()
        if step == steps:
            return curve
        tokens = periodic_batch(random_periods(TRAINING["batch_size"], data), data)  # (B, 33)
        loss = loss_of(model, tokens)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return curve


def run_seed(seed: int, scale: float, evaluation) -> tuple[dict, dict, dict]:
    tokens, periods = evaluation
    steps = {name: max(1, round(n * scale)) for name, n in STEPS.items()}
    every = {name: max(1, round(n * min(1.0, 4 * scale))) for name, n in EVERY.items()}

    def accuracy(model):
        return round(repeated_accuracy(model, tokens, periods), 4)

    def accuracy_and_recall(model):
        return [accuracy(model), *_rounded(indexer_recall(model, tokens))]

    curves, states, seconds = {}, {}, {}
    for kind in ("dense", "moba"):
        start = time.perf_counter()
        torch.manual_seed(seed)
        model = build_sparse_model(kind)
        curves[kind] = train(model, steps["dense"], TRAINING["lr"], seed, accuracy, every["dense"])
        states[kind] = model
        seconds[kind] = round(time.perf_counter() - start, 1)

    start = time.perf_counter()
    torch.manual_seed(seed)
    model = build_sparse_model("indexer")
    load_dense_weights(model, states["dense"].state_dict())
    model.eval()
    if accuracy(model) != curves["dense"]["metrics"][-1]:
        raise RuntimeError("the indexer model in dense mode must reproduce the dense model")
    set_mode(model, "exact")
    exact_topk = accuracy(model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".indexer." in name)
    set_mode(model, "warmup")
    curves["warmup"] = train(
        model,
        steps["warmup"],
        TRAINING["indexer_lr"],
        seed + 100,
        lambda m: _rounded(indexer_recall(m, tokens)),
        every["warmup"],
        indexer_loss,
    )
    set_mode(model, "sparse")
    model.eval()
    after_warmup = accuracy(model)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    curves["sparse"] = train(
        model,
        steps["sparse"],
        TRAINING["indexer_lr"],
        seed + 200,
        accuracy_and_recall,
        every["sparse"],
        sparse_loss,
    )
    states["indexer"] = model
    seconds["indexer"] = round(time.perf_counter() - start, 1)

    summary = {
        "dense": curves["dense"]["metrics"][-1],
        "moba": curves["moba"]["metrics"][-1],
        "exact_top4": exact_topk,
        "indexer_after_warmup_only": after_warmup,
        "indexer": curves["sparse"]["metrics"][-1][0],
        "recall_before_warmup": curves["warmup"]["metrics"][0],
        "recall_after_warmup": curves["warmup"]["metrics"][-1],
        "recall_after_sparse": curves["sparse"]["metrics"][-1][1:],
    }
    weights = {f"{kind}/seed{seed}": m.state_dict() for kind, m in states.items()}
    weights = {n: {k: v.half() for k, v in s.items()} for n, s in weights.items()}
    return {"curves": curves, "summary": summary, "seconds": seconds}, weights, steps


def add_control(directory: Path, kind: str) -> None:
    """Train each seed's shipped dense weights as the sparse stage trains; add it to the manifest.

    ``kind`` "dense" keeps dense attention (``dense_control``); "moba" loads the same weights
    into the MoBA model (``moba_from_dense``), MoBA's own recipe of continuing a dense model.
    """
    name, key = CONTROLS[kind]
    manifest_path = directory / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    data = (directory / WEIGHTS).read_bytes()
    check_sha256(WEIGHTS, data, manifest["sha256"], "python scripts/train_sparse_models.py")
    states = read_state_dict(data)
    tokens, periods = evaluation_batch()
    steps, every = manifest["steps"]["sparse"], manifest["evaluation"]["every"]["sparse"]
    for seed in manifest["seeds"]:
        torch.manual_seed(seed)
        model = build_sparse_model(kind)
        dense = {k: v.float() for k, v in states[f"dense/seed{seed}"].items()}
        if kind == "dense":
            model.load_state_dict(dense)
        else:
            load_dense_weights(model, dense)
        curve = train(
            model,
            steps,
            TRAINING["indexer_lr"],
            seed + 200,
            lambda m: round(repeated_accuracy(m, tokens, periods), 4),
            every,
        )
        run = manifest["runs"][f"seed{seed}"]
        run["curves"][name] = curve
        run["summary"][key] = curve["metrics"][-1]
        print(f"seed {seed}: {kind} from dense + {steps} steps {curve['metrics'][-1]}", flush=True)
    option = name.replace("_", "-")
    manifest[name] = (
        f"the shipped (float16) dense weights trained {steps} more steps with {kind} attention "
        "as the sparse stage (lr 1e-3, data seed + 200, fresh AdamW, language loss only), added "
        f"by `python scripts/train_sparse_models.py --{option}`; weights not shipped"
    )
    if sha256_of(data) != manifest["sha256"]:
        raise RuntimeError("the weights changed while the control ran")
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every step count")
    parser.add_argument("--output", type=Path, default=DATA)
    parser.add_argument(
        "--dense-control",
        action="store_true",
        help="add the dense + sparse-stage-steps control to the manifest in --output",
    )
    parser.add_argument(
        "--moba-from-dense",
        action="store_true",
        help="add MoBA trained sparse-stage steps from the dense weights to the manifest",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.dense_control or args.moba_from_dense:
        add_control(args.output, "dense" if args.dense_control else "moba")
        return
    start = time.perf_counter()
    evaluation = evaluation_batch()
    runs, weights = {}, {}
    for seed in SEEDS:
        runs[f"seed{seed}"], seed_weights, steps = run_seed(seed, args.scale, evaluation)
        weights.update(seed_weights)
        print(f"seed {seed}: {runs[f'seed{seed}']['summary']}", flush=True)
    manifest = {
        "made_by": " ".join(["python", "scripts/train_sparse_models.py", *sys.argv[1:]]),
        "config": MODEL_CONFIG,
        "selection": SELECTION,
        "keys_per_query": KEYS,
        "periods": list(PERIODS),
        "seeds": list(SEEDS),
        "steps": steps,
        "training": {**TRAINING, "optimiser": "AdamW, constant lr"},
        "evaluation": {"sequences": 128, "seed": 1234, "every": EVERY},
        "metric": (
            "accuracy on repeated tokens (exact_top4: the dense model over its own top 4 keys); "
            "recall of the dense top 4 keys per layer"
        ),
        "weights_dtype": "float16",
        "torch": torch.__version__,
        "threads": 1,
        "runs": runs,
    }
    size = write_shipped(args.output, WEIGHTS, weights, MANIFEST, manifest)
    total = time.perf_counter() - start
    print(f"wrote {args.output / WEIGHTS} ({size:,} bytes) and {MANIFEST} in {total:.0f} s")


if __name__ == "__main__":
    main()
