"""Where tensors live, and how to make runs repeatable."""

import os
import random

import numpy as np
import torch

DEVICE_ENV_VAR = "ATTNBOOK_DEVICE"


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
