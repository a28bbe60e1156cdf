"""Chapters a platform cannot run keep their committed outputs, in `make book` and `make test`."""

from pathlib import Path

import pytest
from helpers import load_script

from attnbook.kernels import runtime

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("wheel", [True, False])
def test_only_the_triton_chapter_depends_on_the_platform(monkeypatch, wheel):
    monkeypatch.setattr(runtime, "has_triton_wheel", lambda: wheel)
    assert runtime.why_chapter_cannot_run("09_efficient_attention.ipynb") is None
    reason = runtime.why_chapter_cannot_run("16_flash_kernel.ipynb")
    if wheel:
        assert reason is None
    else:
        assert "triton" in reason and runtime.platform_name() in reason


def test_every_chapter_needing_triton_exists():
    for name in runtime.NEEDS_TRITON:
        assert (ROOT / "book" / name).is_file(), name


def test_the_executor_leaves_a_chapter_it_cannot_run_as_it_is(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(runtime, "has_triton_wheel", lambda: False)
    chapter = tmp_path / "16_flash_kernel.ipynb"
    committed = (ROOT / "book" / "16_flash_kernel.ipynb").read_bytes()
    chapter.write_bytes(committed)
    load_script("execute_notebooks").main([str(chapter)])
    assert chapter.read_bytes() == committed
    assert "kept its committed outputs: it needs triton" in capsys.readouterr().out
