"""Chapter 12, exercise 2: check_longer_training takes the reader's 1,500-step histories and
checks that each passes step 400 at the shipped 400-step loss of its variant and seed.

The correct histories are built from the shipped records (a run longer than 400 steps repeats
the shipped run up to step 400), so no test trains a model.
"""

import dataclasses
import json
import re

import pytest

from attnbook.exercises import ExerciseError
from attnbook.exercises.ch12 import check_longer_training
from attnbook.models import capstone
from attnbook.models.lm_training import TrainingHistory
from attnbook.models.shipped import shipped_file


def shipped_history(name: str, seed: int) -> TrainingHistory:
    """The shipped 400-step history of ``name`` and ``seed`` (MHA: seed 0 only)."""
    if seed == 0:
        manifest = json.loads(shipped_file(capstone.MANIFEST).read_text())
        return TrainingHistory.from_record(manifest["variants"][name])
    return capstone.load_seed_histories()[name][seed]


def longer(history: TrainingHistory, last_loss: float = 1.5) -> TrainingHistory:
    """``history`` run on to step 1,500: one more point after the shipped ones."""
    return dataclasses.replace(
        history,
        steps=[*history.steps, 1500],
        validation_losses=[*history.validation_losses, last_loss],
    )


def with_loss_at_400(history: TrainingHistory, loss: float) -> TrainingHistory:
    losses = list(history.validation_losses)
    losses[history.steps.index(400)] = loss
    return dataclasses.replace(history, validation_losses=losses)


def head_count_mha_loss(seed: int) -> float:
    """MHA's 400-step loss with ``seed``, from the head-count runs (4 heads), as chapter 12."""
    comparison = json.loads(shipped_file("head_count_comparison.json").read_text())
    return comparison["validation_loss"]["4"][comparison["seeds"].index(seed)]


def test_histories_that_repeat_the_shipped_runs_are_accepted(capsys):
    mha_1 = with_loss_at_400(longer(shipped_history("MQA", 1)), head_count_mha_loss(1))
    histories = {
        ("MHA", 0): longer(shipped_history("MHA", 0)),
        ("MQA", 0): longer(shipped_history("MQA", 0)),
        ("MHA", 1): mha_1,
        ("MQA", 1): longer(shipped_history("MQA", 1)),
    }
    check_longer_training(histories)
    printed = capsys.readouterr().out
    assert printed.startswith("Correct: MHA seed 0, MQA seed 0, MHA seed 1, MQA seed 1")


def test_the_head_count_and_shipped_mha_runs_agree_at_seed_0():
    assert head_count_mha_loss(0) == shipped_history("MHA", 0).validation_losses[-1]


def test_an_empty_dict_is_not_attempted_yet(capsys):
    check_longer_training({})
    assert capsys.readouterr().out.startswith("Not attempted yet: longer_histories")


def test_a_loss_off_by_a_bit_at_step_400_fails():
    history = shipped_history("MQA", 2)
    off = with_loss_at_400(longer(history), history.validation_losses[-1] + 2e-5)
    with pytest.raises(ExerciseError, match="the shipped MQA run with seed 2 ended at") as error:
        check_longer_training({("MQA", 2): off})
    assert "another CPU or torch version" in str(error.value)


def test_a_loss_far_from_the_shipped_one_is_told_how_to_train():
    history = shipped_history("MQA", 2)
    off = with_loss_at_400(longer(history), history.validation_losses[-1] + 0.05)
    with pytest.raises(ExerciseError, match=r"train it with train_capstone_model\('MQA'"):
        check_longer_training({("MQA", 2): off})


def test_a_run_under_the_wrong_seed_is_named():
    seed_1_run = longer(shipped_history("GQA", 1))
    with pytest.raises(ExerciseError, match="it is the shipped loss of GQA, seed 1"):
        check_longer_training({("GQA", 0): seed_1_run})


def test_a_run_of_another_variant_is_named():
    with pytest.raises(ExerciseError, match="it is the shipped loss of MLA, seed 0"):
        check_longer_training({("MHA", 0): longer(shipped_history("MLA", 0))})


def test_a_run_that_stops_at_step_400_is_told_to_train_longer():
    with pytest.raises(ExerciseError, match="ends at step 400: train longer"):
        check_longer_training({("MQA", 0): shipped_history("MQA", 0)})


def history_without_step_400() -> TrainingHistory:
    steps = list(range(0, 1501, 60))  # 0, 60, ..., 1440: no 400
    return TrainingHistory(steps, [2.0] * len(steps), 1.8)


@pytest.mark.parametrize(
    ("histories", "words"),
    [
        ([("MHA", 0)], "expected a dict"),
        ({"MHA": None}, "expected (name, seed) keys"),
        ({("MHB", 0): None}, "name expected one of MHA, GQA, MQA, MLA, got 'MHB'"),
        ({("MHA", 3): None}, "seed expected 0, 1 or 2"),
        ({("MHA", True): None}, "seed expected 0, 1 or 2"),
        ({("MHA", 1.0): None}, "seed expected 0, 1 or 2"),
        ({("MHA", 0): (None, None)}, "train_capstone_model returns (model, history)"),
        ({("MHA", 0): {"steps": [400]}}, "expected a TrainingHistory, got dict"),
        ({("MHA", 0): history_without_step_400()}, "records step 400"),
    ],
)
def test_input_it_cannot_check_is_refused_with_a_value_error(histories, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        check_longer_training(histories)
