"""Strict nbval of the chapters: skip those needing a package this platform lacks.

Chapter 16 runs Triton kernels, and Triton has wheels only for Linux on x86-64 and
aarch64. Elsewhere (macOS, Windows) the chapter keeps its committed outputs, which the
book shows, and its nbval run is skipped with the reason.
"""

import pytest

from attnbook.kernels.runtime import why_chapter_cannot_run


def pytest_collection_modifyitems(items):
    for item in items:
        reason = why_chapter_cannot_run(item.path.name)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
