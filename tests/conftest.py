"""Settings the whole test process needs before any test module is imported."""

import os

import torch

# Triton reads TRITON_INTERPRET when it is first imported, and PyTorch may import it before any
# attnbook kernel does (FlexAttention and torch.compile look for it), so on a machine without a
# GPU the test process asks for the interpreter first: attnbook.kernels then runs there.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
