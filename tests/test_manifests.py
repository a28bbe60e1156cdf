"""Damaged manifests of the shipped models: each error names the file and the script to re-run.

A truncated manifest used to raise a bare JSONDecodeError and one missing a key a bare KeyError;
both loaders now say which file is wrong and what regenerates it (attnbook.models.shipped).
"""

import json

import pytest
import torch

from attnbook.analysis import circuits
from attnbook.analysis.circuits import load_circuit_models
from attnbook.models import (
    capstone,
    gated_models,
    position_models,
    recall,
    reference_model,
    sparse_models,
)
from attnbook.models.capstone import load_capstone_models
from attnbook.models.gated_models import load_gated_models
from attnbook.models.position_models import load_position_models
from attnbook.models.recall import load_recall_models
from attnbook.models.reference_model import load_reference_model
from attnbook.models.shipped import write_run_record
from attnbook.models.sparse_models import load_sparse_models

LOADERS = {  # module, loader, manifest fields to remove: top level and nested
    "reference": (
        reference_model,
        lambda: load_reference_model("cpu"),
        [("sha256",), ("config",), ("characters",), ("config", "vocab_size")],
    ),
    "capstone": (
        capstone,
        lambda: load_capstone_models("cpu"),
        [
            ("sha256",),
            ("config",),
            ("variants",),
            ("config", "model"),
            ("variants", "MLA"),
            ("variants", "GQA", "validation_losses"),
        ],
    ),
    "gated": (gated_models, load_gated_models, [("sha256",), ("config",)]),
    "circuits": (circuits, load_circuit_models, [("sha256",)]),
    "sparse": (sparse_models, load_sparse_models, [("sha256",)]),
    "positions": (
        position_models,
        load_position_models,
        [
            ("sha256",),
            ("config",),
            ("models",),
            ("config", "model"),
            ("models", "rope/1"),
            ("models", "alibi/0", "validation_losses"),
        ],
    ),
    "recall": (
        recall,
        load_recall_models,
        [("sha256",), ("config",), ("runs",), ("runs", "softmax/h4/seed0", "layer_pattern")],
    ),
}
WRONG_TYPE = {"gated": "sha256", "circuits": "sha256", "sparse": "sha256"}  # default: config


def damaged(module, monkeypatch, change):
    """Make the module read its manifest as ``change`` turns the shipped bytes."""
    shipped = module._read_shipped

    def read(name):
        data = shipped(name)
        return change(data) if name == module.MANIFEST else data

    monkeypatch.setattr(module, "_read_shipped", read)


def expected_message(module, what):
    regenerate = getattr(module, "RETRAIN", None) or module.REGENERATE
    return f"data/{module.MANIFEST}{what}.*re-run `{regenerate}`"


@pytest.mark.parametrize("which", LOADERS)
@pytest.mark.parametrize("keep", [0.0, 0.5, 0.999])
def test_a_truncated_manifest_names_the_file_and_the_script(monkeypatch, which, keep):
    module, load, _ = LOADERS[which]
    damaged(module, monkeypatch, lambda data: data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match=expected_message(module, " is not valid JSON")):
        load()


@pytest.mark.parametrize("which", LOADERS)
def test_a_manifest_that_is_not_an_object_or_not_text_is_refused(monkeypatch, which):
    module, load, _ = LOADERS[which]
    damaged(module, monkeypatch, lambda data: b"[1, 2]")
    with pytest.raises(ValueError, match=expected_message(module, ": expected a JSON object")):
        load()
    damaged(module, monkeypatch, lambda data: b"\xff\xfe{")
    with pytest.raises(ValueError, match=expected_message(module, " is not valid JSON")):
        load()


def incomplete_cases():
    for which, (_, _, paths) in LOADERS.items():
        for path in paths:
            yield pytest.param(which, path, id=f"{which}-{'.'.join(path)}")


@pytest.mark.parametrize(("which", "path"), list(incomplete_cases()))
def test_a_manifest_missing_a_field_names_it_the_file_and_the_script(monkeypatch, which, path):
    module, load, _ = LOADERS[which]

    def without(data):
        manifest = json.loads(data)
        parent = manifest
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
        return json.dumps(manifest).encode()

    damaged(module, monkeypatch, without)
    message = expected_message(module, f": the manifest has no field '{path[-1]}'")
    with pytest.raises(ValueError, match=message):
        load()


@pytest.mark.parametrize("which", LOADERS)
def test_a_field_of_the_wrong_type_names_the_file_and_the_script(monkeypatch, which):
    module, load, _ = LOADERS[which]

    field = WRONG_TYPE.get(which, "config")

    def field_as_number(data):
        manifest = json.loads(data)
        manifest[field] = 12
        return json.dumps(manifest).encode()

    damaged(module, monkeypatch, field_as_number)
    with pytest.raises(ValueError, match=expected_message(module, ": a field of the manifest has")):
        load()


def test_a_run_record_keeps_its_fields_then_adds_the_torch_version_threads_and_time(
    tmp_path, capsys
):
    path = tmp_path / "runs" / "record.json"
    write_run_record(path, {"made_by": "python x.py", "seeds": [0, 1]}, threads=2, seconds=12.34)
    record = json.loads(path.read_text())
    assert list(record) == ["made_by", "seeds", "torch_version", "threads", "training_seconds"]
    assert record["torch_version"] == torch.__version__
    assert (record["threads"], record["training_seconds"]) == (2, 12.3)
    assert path.read_text().endswith("}\n")
    assert f"wrote {path} in 12 s" in capsys.readouterr().out
