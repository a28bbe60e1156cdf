"""Import Triton the way this machine can run it: compiled for a GPU, or in its interpreter.

Triton compiles ``@triton.jit`` functions for a GPU. With ``TRITON_INTERPRET=1`` it runs them
instead on CPU tensors, one program at a time, each block operation done by NumPy: slow, but
exact enough to check a kernel against PyTorch. Triton reads the variable when a kernel is
defined and some of its modules read it when first imported, so it has to be set before the
first ``import triton``. :func:`import_triton` does that: on a machine where
``torch.cuda.is_available()`` is False it sets ``TRITON_INTERPRET=1`` (unless the variable is
already set), then imports Triton. Code that imports Triton itself should call
:func:`import_triton` first, or set the variable in the shell.

Triton has wheels for Linux on x86-64 and aarch64 only. Elsewhere (macOS, Windows) importing it
fails; :func:`import_triton` turns that into a :class:`TritonUnavailableError` that names the
platform and what to do instead.
"""

import os
import platform
import sys
from types import ModuleType

import torch

INTERPRET_VARIABLE = "TRITON_INTERPRET"
SUPPORTED_MACHINES = ("x86_64", "aarch64")


class TritonUnavailableError(RuntimeError):
    """Triton cannot be imported here (no wheel for this platform, or not installed)."""


def platform_name() -> str:
    """This machine's operating system and processor, e.g. ``Linux x86_64``."""
    return f"{platform.system()} {platform.machine()}"


def has_triton_wheel() -> bool:
    """True where Triton publishes wheels: Linux on x86-64 or aarch64."""
    return sys.platform == "linux" and platform.machine() in SUPPORTED_MACHINES


# the book's chapters (file names under book/) whose kernels need Triton
NEEDS_TRITON = frozenset({"16_flash_kernel.ipynb"})


def why_chapter_cannot_run(notebook_name: str) -> str | None:
    """Why the chapter ``notebook_name`` cannot run on this machine, or None when it can.

    A chapter in :data:`NEEDS_TRITON` cannot run where Triton has no wheel; there it keeps its
    committed outputs: ``make book`` shows them and ``make test`` skips its strict-nbval run.
    """
    if notebook_name in NEEDS_TRITON and not has_triton_wheel():
        return (
            f"needs triton, which has no wheel for {platform_name()} (Linux x86-64/aarch64 "
            "only): run this chapter on Linux, in WSL or on a GPU machine"
        )
    return None


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get(INTERPRET_VARIABLE, "0").lower() in ("1", "true", "on", "yes")


def import_triton() -> tuple[ModuleType, ModuleType]:
    """``(triton, triton.language)``, in the interpreter where there is no CUDA device.

    Raises :class:`TritonUnavailableError` naming the platform when Triton cannot be imported.
    """
    if not torch.cuda.is_available():
        if "triton" in sys.modules and not interpreting():
            raise TritonUnavailableError(
                f"triton was imported without {INTERPRET_VARIABLE}=1 on a machine with no CUDA "
                "device, so its kernels cannot run here; set it before anything imports triton "
                f"(`{INTERPRET_VARIABLE}=1` in the shell, or restart the kernel and import "
                "attnbook first)"
            )
        os.environ.setdefault(INTERPRET_VARIABLE, "1")
    try:
        import triton
        import triton.language as tl
    except ImportError as error:
        if has_triton_wheel():
            advice = (
                "install it with `pip install -r requirements.txt` (it pins triton for this "
                "platform)"
            )
        else:
            advice = (
                "Triton has wheels only for Linux on x86-64 and aarch64; run this chapter on "
                "Linux, in WSL on Windows, or on a GPU machine (a cloud notebook with CUDA)"
            )
        raise TritonUnavailableError(
            f"triton cannot be imported on {platform_name()} ({error}); {advice}"
        ) from error
    return triton, tl
