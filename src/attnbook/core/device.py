"""Where tensors live, and how to make runs repeatable."""

import os
import random

import numpy as np
import torch

DEVICE_ENV_VAR = "ATTNBOOK_DEVICE"
CUDA_INSTALL = (
    "install torch's CUDA build into .venv: `make distclean`, then `make TORCH_BUILD=default lab` "
    "(or see https://pytorch.org/get-started/locally/)"
)


def _available(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_available()
    if device.type == "mps":
        return torch.backends.mps.is_available()
    return device.type == "cpu"


def get_device() -> torch.device:
    """The device the book computes on.

    The environment variable ``ATTNBOOK_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) wins;
    otherwise the first available of CUDA, Apple's MPS and the CPU.
    """
    requested = os.environ.get(DEVICE_ENV_VAR, "").strip()
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as error:
            raise ValueError(
                f"{DEVICE_ENV_VAR}: expected a torch device such as 'cpu', 'cuda' or 'mps', "
                f"got {requested!r}"
            ) from error
        if device.type == "cuda" and torch.version.cuda is None and torch.version.hip is None:
            raise ValueError(
                f"{DEVICE_ENV_VAR}: asks for {requested!r}, but the installed torch "
                f"{torch.__version__} has no CUDA support (torch.version.cuda is None, a "
                f"CPU-only build): {CUDA_INSTALL}"
            )
        if not _available(device):
            raise ValueError(
                f"{DEVICE_ENV_VAR}: asks for {requested!r}, but this machine has no such device"
            )
        return device
    for candidate in ("cuda", "mps"):
        if _available(torch.device(candidate)):
            return torch.device(candidate)
    return torch.device("cpu")


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's generators (all devices) so a run repeats exactly."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
