"""The shipped chapter 7 numbers (data/position_schemes.json, scripts/score_position_schemes.py)."""

import hashlib
import json
import math

import pytest

from attnbook.models.shipped import shipped_file


@pytest.fixture(scope="module")
def shipped():
    return json.loads(shipped_file("position_schemes.json").read_text())


def test_the_file_names_its_results_by_their_sha256(shipped):
    canonical = json.dumps(shipped["results"], sort_keys=True).encode()
    assert hashlib.sha256(canonical).hexdigest() == shipped["sha256"]
    changed = dict(shipped["results"], extra={"all_windows": {}})
    canonical = json.dumps(changed, sort_keys=True).encode()
    assert hashlib.sha256(canonical).hexdigest() != shipped["sha256"]


def test_every_scheme_and_seed_is_scored_on_all_windows_and_the_chapters(shipped):
    schemes = ("learned", "sinusoidal", "rope", "alibi", "none")
    assert sorted(shipped["results"]) == sorted(f"{s}/{seed}" for s in schemes for seed in (0, 1))
    assert shipped["validation_windows"] == {"all": 76, "chapter": 16, "length": 256}
    for result in shipped["results"].values():
        for part in ("all_windows", "first_16_windows"):
            losses = (result[part]["inside"], result[part]["beyond"])
            assert all(math.isfinite(loss) and 1.0 < loss < math.log(60) for loss in losses)


def test_the_settings_are_the_chapters(shipped):
    # book/07_positions.ipynb, "Train short, test long": sizes and budget
    assert shipped["model"] == {"d_model": 32, "n_heads": 4, "n_layers": 2, "max_len": 256}
    assert shipped["training"] == {"steps": 80, "batch_size": 8, "block_size": 64, "lr": 1e-2}
