"""The Triton bench section: on a machine without CUDA it says it needs a GPU."""

import pytest
import torch

from attnbook.bench import triton as triton_section


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the section runs")
def test_without_cuda_the_section_says_it_needs_a_gpu():
    text = triton_section.run(quick=True)
    assert text.splitlines()[0].startswith("Triton FlashAttention kernels")
    assert "skipped: this section needs a CUDA GPU" in text
    assert "ms" not in text  # no timing from the interpreter
