"""Strict nbval of the chapters: skip those needing a package this platform lacks.

Chapter 16 runs Triton kernels, and Triton has wheels only for Linux on x86-64 and
aarch64. Elsewhere (macOS, Windows) the chapter keeps its committed outputs, which the
book shows, and its nbval run is skipped with the reason.
"""

import pytest

from attnbook.kernels.runtime import has_triton_wheel, platform_name

NEEDS_TRITON = {"16_flash_kernel.ipynb"}


def pytest_collection_modifyitems(items):
    if has_triton_wheel():
        return
    skip = pytest.mark.skip(
        reason=f"needs triton, which has no wheel for {platform_name()} (Linux "
        "x86-64/aarch64 only): run this chapter on Linux, in WSL or on a GPU machine"
    )
    for item in items:
        if item.path.name in NEEDS_TRITON:
            item.add_marker(skip)
