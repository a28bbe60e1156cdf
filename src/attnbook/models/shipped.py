"""Files shipped in ``data/`` (installed as the package ``attnbook.data``), read and checked.

Every trained artefact the book ships is a pair: weights (a state dict) and a JSON manifest
that names them by their sha256. These helpers find a shipped file wherever the package is
installed, read it, refuse one whose hash differs from its manifest's, and read a state dict
without unpickling arbitrary objects (``weights_only=True``). Each error names the command
that regenerates the file.
"""

import hashlib
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import torch


def sha256_of(data: bytes) -> str:
    """The hex sha256 of ``data``: how a manifest names the weights it belongs to."""
    return hashlib.sha256(data).hexdigest()


def shipped_file(name: str):
    """The file ``name`` shipped in ``data/`` (the package ``attnbook.data``), wherever installed.

    A ``Traversable``: read it with ``.read_text()`` or ``.read_bytes()``.
    """
    return files("attnbook.data") / name


def read_shipped(name: str, regenerate: str) -> bytes:
    """The shipped file ``name``'s bytes; if absent, ``FileNotFoundError`` naming ``regenerate``."""
    path = shipped_file(name)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: regenerate it with `{regenerate}`")
    return path.read_bytes()


def read_manifest(name: str, data: bytes, regenerate: str) -> dict:
    """The JSON object in manifest ``name``; a truncated or non-object one is a ``ValueError``."""
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"data/{name} is not valid JSON ({error}): the manifest is truncated or damaged; "
            f"re-run `{regenerate}`"
        ) from None
    if not isinstance(manifest, dict):
        raise ValueError(
            f"data/{name}: expected a JSON object, got a JSON {type(manifest).__name__}: re-run "
            f"`{regenerate}`"
        )
    return manifest


@contextmanager
def manifest_fields(name: str, regenerate: str) -> Iterator[None]:
    """Read manifest ``name``'s fields inside this block.

    A missing field (KeyError) or one of the wrong type (TypeError, IndexError, AttributeError)
    becomes a ``ValueError`` naming the file and the command ``regenerate`` that rewrites it.
    """
    try:
        yield
    except KeyError as error:
        raise ValueError(
            f"data/{name}: the manifest has no field {error}: it is incomplete; re-run "
            f"`{regenerate}`"
        ) from error
    except (TypeError, IndexError, AttributeError) as error:
        raise ValueError(
            f"data/{name}: a field of the manifest has the wrong type ({error}): re-run "
            f"`{regenerate}`"
        ) from error


def check_sha256(name: str, data: bytes, expected: str, regenerate: str) -> None:
    """Raise ``ValueError`` (naming ``regenerate``) unless ``data`` has the sha256 ``expected``."""
    digest = sha256_of(data)
    if digest != expected:
        raise ValueError(
            f"data/{name}: sha256 {digest[:12]}... differs from the manifest's "
            f"{expected[:12]}...: the file was changed; re-run `{regenerate}`"
        )


def check_config(name: str, recorded: dict, expected: dict, owner: str, regenerate: str) -> None:
    """Raise ``ValueError`` (naming the differing keys) unless a manifest's config is ``expected``.

    ``owner`` names whose settings ``expected`` holds, e.g. "attnbook.models.capstone's".
    """
    if recorded != expected:
        differing = sorted(key for key in expected if recorded.get(key) != expected[key])
        raise ValueError(
            f"data/{name}: its config differs from {owner} settings in {differing}: the models "
            f"were trained with other settings; re-run `{regenerate}`"
        )


def load_weights(
    model: torch.nn.Module, states: dict, key: str, name: str, regenerate: str
) -> None:
    """Load ``states[key]`` into ``model``; a missing or misfitting one raises ``ValueError``."""
    try:
        model.load_state_dict(states[key])
    except (KeyError, RuntimeError, AttributeError) as error:
        raise ValueError(
            f"data/{name}: the {key} weights do not fit its model: re-run `{regenerate}` "
            f"({error!r})"
        ) from error


def read_state_dict(data: bytes) -> dict:
    """A state dict (or a dict of them) from ``torch.save``'d bytes, tensors on the CPU."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def write_shipped(
    directory: Path, weights_name: str, state: dict, manifest_name: str, manifest: dict
) -> int:
    """Save ``state`` as ``weights_name`` and ``manifest`` as ``manifest_name`` in ``directory``.

    The manifest gets the weights' ``sha256`` and ``bytes`` added, as the loaders check them.
    Returns the size of the weights in bytes.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    weights = buffer.getvalue()
    manifest = {**manifest, "sha256": sha256_of(weights), "bytes": len(weights)}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / weights_name).write_bytes(weights)
    (directory / manifest_name).write_text(json.dumps(manifest, indent=1) + "\n")
    return len(weights)


def write_run_record(path: Path, record: dict, *, threads: int, seconds: float) -> None:
    """Write a training script's record of its runs to ``path`` as JSON: ``record``, then the
    torch version, the CPU threads and the seconds the runs took; and say where it went."""
    full = {
        **record,
        "torch_version": torch.__version__,
        "threads": threads,
        "training_seconds": round(seconds, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(full, indent=1) + "\n")
    print(f"wrote {path} in {seconds:.0f} s")
