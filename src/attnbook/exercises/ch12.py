"""Chapter 12's exercise checkers: KV cache bytes per token of a TinyDecoder of any attention
variant, the 400-step point of the reader's longer training runs, and a head's mean weight on
the first letter of the current word.

``check_longer_training`` checks data, not a function: the runs take minutes, so the reader
trains them and hands over the histories. It is imported from this module, not listed in
``attnbook.exercises``, whose checkers all take the reader's function.
"""

import json
from collections.abc import Callable

import torch
from torch import Tensor

from attnbook.core.masks import causal_mask
from attnbook.exercises._common import (
    _as_tensor,
    _call,
    _checker,
    _close,
    _fail,
    _generator,
    _succeed,
)
from attnbook.models import capstone
from attnbook.models.decoder import TinyDecoder
from attnbook.models.lm_training import TrainingHistory
from attnbook.models.shipped import shipped_file

# Chapter 12: KV cache bytes per token of a TinyDecoder of any attention variant.


def _cache_models() -> list[tuple[str, TinyDecoder]]:
    """(description, model) pairs: every variant, float64 once, MLA with and without RoPE.

    The 3-layer model comes first: there, forgetting the values (x 1/2) and forgetting to sum
    the layers (x 1/3) give different wrong answers, so the hint can tell which it was.
    """
    torch.manual_seed(0)
    specs = [  # description, layers, TinyDecoder keywords
        ("3-layer GQA, H = 4, H_kv = 2, d_head = 4, float32", 3, {"n_kv_heads": 2}),
        ("2-layer MHA, H = H_kv = 4, d_head = 4, float32", 2, {"n_kv_heads": 4}),
        ("2-layer MQA, H = 4, H_kv = 1, d_head = 4, float32", 2, {"n_kv_heads": 1}),
        ("2-layer MLA, d_c = 6, no RoPE, float32", 2, {"kv_latent_dim": 6}),
        ("2-layer MLA, d_c = 6, rope_dim = 4, float32", 2, {"kv_latent_dim": 6, "rope_dim": 4}),
    ]
    sizes = {"d_model": 16, "n_heads": 4, "max_len": 12}
    models = [
        (label, TinyDecoder(11, n_layers=layers, **sizes, **keywords).eval())
        for label, layers, keywords in specs
    ]
    gqa64 = TinyDecoder(11, n_layers=3, n_kv_heads=2, **sizes).double().eval()
    return models + [("3-layer GQA, H = 4, H_kv = 2, d_head = 4, float64", gqa64)]


def _cache_hint(model: TinyDecoder, result: int, expected: int) -> str:
    attention = model.blocks[0].attention
    if next(model.parameters()).dtype == torch.float64 and 2 * result == expected:
        return "take the bytes per number from the parameters' dtype (8 for float64), not 4"
    bytes_per_number = next(model.parameters()).element_size()
    if result * bytes_per_number == expected:
        return (
            "that counts numbers, not bytes: multiply by the bytes per number, "
            f"the parameters' element_size() ({bytes_per_number} here)"
        )
    if model.variant == "mla":
        if attention.rope_dim and result * (attention.kv_latent_dim + attention.rope_dim) == (
            expected * attention.kv_latent_dim
        ):
            return "with RoPE, MLA also caches one rotary key of rope_dim numbers per token"
        return "MLA caches one latent of kv_latent_dim (+ rope_dim) numbers per token and layer"
    if result * len(model.blocks) == expected:
        return "every layer keeps its own cache: add them all up"
    if 2 * result == expected:
        return "every key/value head caches a key AND a value per token"
    if result * attention.n_kv_heads == expected * attention.n_heads:
        return "count the key/value heads (n_kv_heads), not the query heads"
    return "per layer: 2 * n_kv_heads * head_dim numbers, or kv_latent_dim + rope_dim for MLA"


@_checker
def check_cache_bytes_per_token(fn: Callable[[TinyDecoder], int]) -> None:
    """``fn(model)`` -> the KV cache bytes one token costs a :class:`TinyDecoder`, any variant."""
    prompt = torch.randint(0, 11, (1, 5), generator=_generator(0))  # (B, T)
    for label, model in _cache_models():
        caches = model.new_caches()
        with torch.no_grad():
            model(prompt, caches)
        expected = sum(cache.nbytes for cache in caches) // prompt.size(1)
        call = f"cache_bytes_per_token(<{label}>)"
        result = _call(fn, call, model)
        if isinstance(result, bool) or not isinstance(result, int):
            _fail(f"{call} should return an int (bytes), got {type(result).__name__}")
        if result != expected:
            _fail(
                f"{call} returned {result}, but its caches hold {expected} bytes per token: "
                f"{_cache_hint(model, result, expected)}"
            )
    _succeed("your formula gives the bytes the caches hold, for every variant and dtype")


# Chapter 12, exercise 2: longer training runs pass step 400 where the shipped runs ended.

_CHECK_STEP = capstone.TRAINING["steps"]  # 400: where every shipped run ends
_SHIPPED_SEEDS = (0, 1, 2)


def _shipped_final_losses() -> dict[str, list[float]]:
    """Each variant's 400-step validation loss with seeds 0, 1 and 2, from the files chapter 12
    reads: MHA from the head-count runs (4 heads), the others from the shipped models (seed 0)
    and the seed histories (seeds 1 and 2)."""
    comparison = json.loads(shipped_file("head_count_comparison.json").read_text())
    manifest = json.loads(shipped_file(capstone.MANIFEST).read_text())
    seed_histories = capstone.load_seed_histories()
    losses = {
        "MHA": [
            comparison["validation_loss"]["4"][comparison["seeds"].index(s)] for s in _SHIPPED_SEEDS
        ]
    }
    for name in seed_histories:
        seed_0 = manifest["variants"][name]["validation_losses"][-1]
        losses[name] = [seed_0] + [seed_histories[name][s].validation_losses[-1] for s in (1, 2)]
    return losses


def _check_run_key(key: object, shipped: dict[str, list[float]]) -> tuple[str, int]:
    if not isinstance(key, tuple) or len(key) != 2:
        raise ValueError(f"histories: expected (name, seed) keys, got {key!r}")
    name, seed = key
    if name not in shipped:
        raise ValueError(
            f"histories key {key!r}: name expected one of {', '.join(shipped)}, got {name!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed not in _SHIPPED_SEEDS:
        raise ValueError(
            f"histories key {key!r}: seed expected 0, 1 or 2 (the seeds with a shipped "
            f"{_CHECK_STEP}-step run), got {seed!r}"
        )
    return name, seed


def _check_history(label: str, history: object) -> float:
    """The validation loss ``history`` records at step 400; ValueError if it has none."""
    if isinstance(history, tuple):
        raise ValueError(
            f"histories[{label}]: expected a TrainingHistory, got a tuple; "
            "train_capstone_model returns (model, history): keep the history"
        )
    if not isinstance(history, TrainingHistory):
        raise ValueError(
            f"histories[{label}]: expected a TrainingHistory, got {type(history).__name__}"
        )
    if _CHECK_STEP not in history.steps:
        raise ValueError(
            f"histories[{label}]: expected a history that records step {_CHECK_STEP}, got steps "
            f"{history.steps[:3]} ... {history.steps[-1:]}; train_capstone_model evaluates "
            "every 25 steps"
        )
    return history.validation_losses[history.steps.index(_CHECK_STEP)]


# Below this, a different loss at step 400 is rounding carried through training, not a bug.
_CPU_DRIFT = 1e-3


def _loss_hint(name: str, seed: int, loss: float, shipped: dict[str, list[float]]) -> str:
    for other, losses in shipped.items():
        for other_seed, shipped_loss in enumerate(losses):
            if abs(loss - shipped_loss) <= 1e-5 and (other, other_seed) != (name, seed):
                return (
                    f"it is the shipped loss of {other}, seed {other_seed}: pass that run "
                    f"under the key ({other!r}, {other_seed}), or train {name} with "
                    f"seed={seed}"
                )
    if abs(loss - shipped[name][seed]) < _CPU_DRIFT:
        return (
            "a gap this small is what another CPU or torch version can make (its sums round "
            "in another order, and 400 steps carry the difference on), not a bug: if you "
            f"called train_capstone_model({name!r}, ..., seed={seed}), compare your curve "
            "with the shipped one by eye instead"
        )
    return (
        f"train it with train_capstone_model({name!r}, len(vocab), train_ids, "
        f"validation_ids, steps=1500, seed={seed}): the same model, data and batch order "
        "as the shipped runs"
    )


def check_longer_training(histories: dict) -> None:
    """``histories[name, seed]``: the TrainingHistory of ``name`` trained longer with ``seed``.

    Each must pass step 400 at the shipped 400-step validation loss of the same variant and
    seed (within 1e-5), and run past it. An empty dict is an exercise not attempted yet.
    Raises ``ValueError`` for a key or history it cannot check, and ``ExerciseError`` for a
    history that departs from the shipped run.
    """
    if not isinstance(histories, dict):
        raise ValueError(
            "histories: expected a dict {(name, seed): TrainingHistory}, got "
            f"{type(histories).__name__}"
        )
    if not histories:
        print(
            "Not attempted yet: longer_histories is still empty. Train the runs, keep each "
            "history under its (name, seed), then run this check again."
        )
        return
    shipped = _shipped_final_losses()
    for key, history in histories.items():
        name, seed = _check_run_key(key, shipped)
        label = f"{name!r}, {seed}"
        loss = _check_history(label, history)
        expected = shipped[name][seed]
        if abs(loss - expected) > 1e-5:
            _fail(
                f"histories[{label}] has {loss:.6f} at step {_CHECK_STEP}, but the shipped "
                f"{name} run with seed {seed} ended at {expected:.6f}: "
                f"{_loss_hint(name, seed, loss, shipped)}"
            )
        if history.steps[-1] <= _CHECK_STEP:
            _fail(f"histories[{label}] ends at step {history.steps[-1]}: train longer (steps=1500)")
    runs = ", ".join(f"{name} seed {seed}" for name, seed in histories)
    _succeed(
        f"{runs}: at step {_CHECK_STEP}, the loss of the shipped run with the same variant "
        "and seed (within 1e-5), so your runs repeat the shipped ones up to there"
    )


# Chapter 12, exercise 3: a head's mean weight on the first letter of the current word.

_SEPARATORS = [4, 0]  # the ids of the space and the line break in the checker's windows
_WINDOWS = [  # (B, T): spaces at 4, 7, 8 / a space at 0, a line break at 4 / a space at 7
    [1, 2, 3, 1, 4, 2, 3, 4, 4, 1],  # and a line break at 9, so that reading row[t - 1] at
    [4, 1, 2, 3, 0, 1, 2, 3, 1, 2],  # t = 0 (Python's row[-1], or torch.roll) makes s = 0
    [1, 1, 1, 1, 1, 1, 1, 4, 2, 0],  # a word start in the last window
]


def _word_start(
    row: list[int],
    t: int,
    *,
    first: bool = False,
    strict: bool = False,
    space_only: bool = False,
    wrap: bool = False,
) -> int:
    """The key s the exercise asks for at query t: the largest s, 1 <= s <= t, after a
    separator.

    -1 when there is none. ``first`` takes the smallest such s, ``strict`` leaves s = t out,
    ``space_only`` counts the first separator (the space) alone, ``wrap`` lets s = 0 count
    when the window's last token is a separator (four mistakes the hints name).
    """
    last = t - 1 if strict else t
    separators = _SEPARATORS[:1] if space_only else _SEPARATORS
    starts = [s for s in range(0 if wrap else 1, last + 1) if row[s - 1] in separators]
    if not starts:
        return -1
    return starts[0] if first else starts[-1]


def _start_of_word_mean(
    weights: Tensor,
    *,
    first: bool = False,
    strict: bool = False,
    offset: int = 0,
    skipped: str = "skip",
    per_window: bool = False,
    from_space: bool = False,
    skip_letters: int = 0,
    skip_separators: bool = False,
    space_only: bool = False,
    wrap: bool = False,
) -> Tensor:
    """(L, H): the mean weight on the word start over (b, t), or one of the named mistakes.

    ``offset=-1`` reads the separator itself; ``from_space`` reads the latest separator at or
    before the query, from the separator on (its own query included); ``skipped`` is what
    queries with no separator before them contribute ("skip", "zero" or "key0");
    ``per_window`` averages each window first; ``skip_letters`` leaves out the queries on a
    word's first ``skip_letters`` letters (``t - s < skip_letters``); ``skip_separators`` leaves
    out the queries on a separator; ``space_only`` takes the space for the only separator;
    ``wrap`` reads the window's last token as the one before t = 0.
    """
    window_means = []
    total, count = weights.new_zeros(weights.shape[0], weights.shape[2]), 0  # (L, H)
    for b, row in enumerate(_WINDOWS):
        row_total, row_count = torch.zeros_like(total), 0  # (L, H)
        for t in range(len(row)):
            s = _word_start(row, t, first=first, strict=strict, space_only=space_only, wrap=wrap)
            if from_space:  # key p, the latest separator p <= t: the start of query t + 1
                s, offset = _word_start(row, t + 1), -1
            on_separator = skip_separators and row[t] in _SEPARATORS
            left_out = s >= 0 and (0 <= t - s < skip_letters or on_separator)
            if (s < 0 and skipped == "skip") or left_out:
                continue
            if s < 0 and skipped == "zero":
                row_count += 1
                continue
            row_total += weights[:, b, :, t, max(s, 0) + (offset if s > 0 else 0)]
            row_count += 1
        window_means.append(row_total / row_count)
        total, count = total + row_total, count + row_count
    return torch.stack(window_means).mean(dim=0) if per_window else total / count


_START_MISTAKES = [  # (keywords of _start_of_word_mean, the hint)
    (
        {"offset": -1},
        "that is the weight on the separator itself; the word's first letter is the key "
        "just after it (the s with windows[b, s - 1] in separator_ids)",
    ),
    (
        {"from_space": True},
        "that reads the separator itself, from the separator on; the word's first letter is "
        "the key just after it, and a query on a separator still belongs to the previous word",
    ),
    (
        {"first": True},
        "that uses the first separator of the window; take the most recent one before the query",
    ),
    (
        {"strict": True},
        "a query just after a space is itself its word's first letter: let s = t count "
        "(1 <= s <= t)",
    ),
    (
        {"skip_letters": 1},
        "a query on its word's first letter reads itself as the word start: keep it, and let "
        "s = t count (1 <= s <= t)",
    ),
    (
        {"skip_letters": 2},
        "that leaves out the queries on a word's first two letters, as the section's measure "
        "(word_start_weight with its default skip_letters=2) does; the exercise keeps every "
        "query that has a word start",
    ),
    (
        {"skip_separators": True},
        "that leaves out the queries on a separator; a query on the space or line break that "
        "ends a word still belongs to that word: keep it",
    ),
    (
        {"space_only": True},
        "that counts only the space; a line break ends a word too: the word starts after any "
        "of separator_ids",
    ),
    (
        {"wrap": True},
        "t = 0 has no previous character: row[t - 1] at t = 0 (or torch.roll) wraps around to "
        "the window's last token, and a separator there makes key 0 a word start; s starts "
        "at 1",
    ),
    (
        {"skipped": "zero"},
        "queries with no separator before them have no word start: leave them out of the "
        "average instead of counting them as 0",
    ),
    (
        {"skipped": "key0"},
        "queries with no separator before them have no word start: skip them rather than "
        "reading key 0",
    ),
    (
        {"per_window": True},
        "average over all (window, query) pairs together, not per window and then over "
        "windows: windows hold different numbers of such queries",
    ),
]


@_checker
def check_start_of_word_weight(fn: Callable[[Tensor, Tensor, list[int]], Tensor]) -> None:
    """``fn(weights (L, B, H, T, T), windows (B, T), separator_ids)`` -> (L, H) mean weights.

    The mean, over every window b and query t with a separator before it, of the weight on
    key s, the largest s with 1 <= s <= t and ``windows[b, s - 1]`` in ``separator_ids``.
    """
    windows = torch.tensor(_WINDOWS)  # (B, T)
    n_batch, n_tokens = windows.shape
    scores = torch.randn(2, n_batch, 3, n_tokens, n_tokens, generator=_generator(0))
    # (L, B, H, T, T): causal attention weights of 2 layers of 3 heads
    weights = scores.masked_fill(~causal_mask(n_tokens), float("-inf")).softmax(dim=-1)
    expected = _start_of_word_mean(weights)  # (L, H)
    call = (
        "start_of_word_weight(weights (2, 3, 3, 10, 10), windows (3, 10), "
        f"separator_ids={_SEPARATORS})"
    )
    arguments = (weights.clone(), windows.clone(), list(_SEPARATORS))
    result = _as_tensor(_call(fn, call, *arguments), call, "(L, H)")
    if tuple(result.shape) != (2, 3):
        _fail(f"{call} should return shape (L, H) = (2, 3), got {tuple(result.shape)}")
    if _close(result, expected, atol=1e-6):
        _succeed("each head's mean weight on the first letter of the current word")
        return
    for keywords, hint in _START_MISTAKES:
        if _close(result, _start_of_word_mean(weights, **keywords), atol=1e-6):
            _fail(f"{call}: {hint}")
    _fail(
        f"{call} returned {result.flatten().tolist()}, expected "
        f"{[round(value, 4) for value in expected.flatten().tolist()]}"
    )
