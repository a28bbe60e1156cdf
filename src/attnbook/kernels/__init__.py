"""FlashAttention as Triton kernels: the forward and backward passes of chapter 9's tiled
attention, written as ``@triton.jit`` programs.

- ``runtime``: importing Triton, in its interpreter (``TRITON_INTERPRET=1``) on a machine
  without CUDA, with a clear error where Triton has no wheel (macOS, Windows);
- ``forward``: the FlashAttention-2 forward kernel, one program per block of queries;
- ``backward``: the backward kernels: the row dot products (delta), dk and dv per block of
  keys, dq per block of queries;
- ``attention``: :func:`triton_attention`, the checked, differentiable entry point.

Only ``runtime`` and ``attention`` import without Triton; ``forward`` and ``backward`` define
kernels, so they import Triton through :func:`attnbook.kernels.runtime.import_triton`.
"""
