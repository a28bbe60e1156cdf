"""A Gated DeltaNet layer in the spirit of Qwen3-Next's linear-attention layers.

x (B, T, D) -> projections q, k, v (H heads of d_head) -> a short causal convolution over the
last ``conv_kernel`` tokens and SiLU -> q and k L2-normalised per head (q then scaled by
1 / sqrt(d_head)) -> the gated delta rule with alpha and beta computed from x -> a per-head
RMS norm of the output, multiplied by SiLU(gate(x)) -> the output projection.

* The output is linear in q, and the per-head RMS norm divides any positive factor on it out
  again, up to the norm's eps: q's length, its L2 normalisation and the 1 / sqrt(d_head) set
  no sharpness (unlike softmax's scale); the scale is kept to match Qwen3-Next.

* ``beta = sigmoid(b_proj(x))``: how strongly each token writes, per head.
* ``alpha = exp(-exp(A_log) * softplus(a_proj(x) + dt_bias))``: the decay per token and head,
  Mamba-2's parametrisation, which Qwen3-Next uses; in (0, 1].
* The short convolution mixes each channel with its ``conv_kernel - 1`` predecessors. A single
  linear-attention layer can only file a value under a key if one token sees both; the
  convolution lets the value's token see the key just before it, the job a previous-token head
  does in a softmax model (Zoology's recall task needs exactly that).

Training runs the chunked form; with a :class:`attnbook.RecurrentState` as ``cache`` the layer
continues from the stored state, one token at a time (O(1) work and memory per token) or a
chunk of tokens at once, and stores the new state.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attnbook.core._checks import check_head_mask, check_int, check_model_input
from attnbook.core.trace import record
from attnbook.linear.delta_rule import gated_delta_rule
from attnbook.linear.state import RecurrentState


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet token mixing: ``forward(x) -> (output (B, T, D), None)``.

    Called like :class:`attnbook.GroupedQueryAttention` in causal self-attention, so a
    :class:`attnbook.TinyDecoder` block can hold either: ``mask`` must be None and
    ``is_causal`` True (the layer is causal by construction), ``need_weights`` gives None
    (there is no (T, T) matrix), ``head_mask`` (H,) or (B, H) gates each head's output,
    ``cache`` is a :class:`attnbook.RecurrentState` (``new_cache()``). ``chunk_size`` is the
    chunked form's C; every head has d_k = d_v = d_head = D / H.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, conv_kernel: int = 4, chunk_size: int = 64
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("chunk_size", chunk_size)):
            check_int(name, value)
        check_int("conv_kernel", conv_kernel)
        if d_model % n_heads:
            raise ValueError(f"n_heads: must divide d_model = {d_model}, got {n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.conv_kernel, self.chunk_size = conv_kernel, chunk_size
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        # depthwise: each of the 3D channels mixes only its own last conv_kernel values
        self.conv = nn.Conv1d(3 * d_model, 3 * d_model, conv_kernel, groups=3 * d_model)
        self.a_proj = nn.Linear(d_model, n_heads, bias=False)
        self.b_proj = nn.Linear(d_model, n_heads, bias=False)
        self.A_log = nn.Parameter(torch.zeros(n_heads))
        self.dt_bias = nn.Parameter(torch.zeros(n_heads))
        self.gate_proj = nn.Linear(d_model, d_model, bias=False)
        self.norm = nn.RMSNorm(self.head_dim, eps=1e-6)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def new_cache(self) -> RecurrentState:
        """An empty state for decoding, to pass as ``cache``."""
        return RecurrentState()

    def gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """alpha (B, H, T) in (0, 1] and beta (B, H, T) in (0, 1) for the input x (B, T, D)."""
        rate = self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)  # (B, T, H)
        # (B, T, H); clamped so that underflow never gives alpha = 0
        alpha = torch.exp(-rate).clamp_min(torch.finfo(x.dtype).tiny)
        beta = torch.sigmoid(self.b_proj(x))  # (B, T, H)
        return alpha.transpose(1, 2), beta.transpose(1, 2)

    def _convolve(self, mixed: Tensor, past: Tensor | None) -> tuple[Tensor, Tensor]:
        """Causal depthwise convolution of (B, T, 3D) after ``past`` (B, K - 1, 3D) or zeros."""
        if past is None:
            past = mixed.new_zeros(mixed.size(0), self.conv_kernel - 1, mixed.size(2))
        padded = torch.cat([past, mixed], dim=1)  # (B, K - 1 + T, 3D)
        if mixed.size(1) == 1:
            # one decoded token: a multiply-and-sum over the K inputs, the same numbers as
            # the convolution without its per-call overhead (the decoding path's largest cost)
            weight = self.conv.weight[:, 0].T  # (K, 3D)
            convolved = (padded * weight).sum(1, keepdim=True) + self.conv.bias  # (B, 1, 3D)
        else:
            # (B, T, 3D)
            convolved = self.conv(padded.transpose(1, 2)).transpose(1, 2)
        return F.silu(convolved), padded[:, padded.size(1) - (self.conv_kernel - 1) :]

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, d_head)."""
        return x.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)

    def mix(
        self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The token mixing proper: the gated delta rule on q, k, v (B, H, T, d_head).

        Returns the heads' outputs (B, H, T, d_head) and the final memory (B, H, d_k, d_v).
        One token at a time runs the recurrence, more the chunked form.
        """
        q = F.normalize(q, dim=-1) / math.sqrt(self.head_dim)  # (B, H, T, d_head)
        k = F.normalize(k, dim=-1)  # (B, H, T, d_head)
        alpha, beta = self.gates(x)  # (B, H, T)
        record("alpha", alpha, "B H T", "decay per token and head, in (0, 1]")
        chunk = None if x.size(1) == 1 else self.chunk_size
        return gated_delta_rule(q, k, v, alpha, beta, chunk_size=chunk, initial_state=memory)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = True,
        need_weights: bool = False,
        cache: RecurrentState | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, None]:
        check_model_input("x", x, "(B, T, D)", self.d_model)
        if mask is not None or not is_causal:
            raise ValueError(
                "mask: a Gated DeltaNet layer is causal by construction; pass mask=None and "
                f"is_causal=True, got a mask: {mask is not None}, is_causal={is_causal}"
            )
        check_head_mask(head_mask, x.size(0), self.n_heads, x.dtype)
        past_conv = None if cache is None else cache.conv_inputs
        memory = None if cache is None else cache.memory
        # (B, T, 3D), (B, K - 1, 3D)
        mixed, conv_inputs = self._convolve(self.qkv_proj(x), past_conv)
        q, k, v = (self._heads(part) for part in mixed.chunk(3, dim=-1))  # (B, H, T, d_head)
        record("q", q, "B H T d_head", "queries after the short convolution")
        record("v", v, "B H T d_head", "values, one per head")
        # (B, H, T, d_head), (B, H, d_head, d_head) or None
        out, memory = self.mix(q, k, v, x, memory)
        if memory is not None:
            record("state", memory, "B H d_head d_head", "the memory S after the last token")
        if cache is not None:
            cache.update(memory, conv_inputs, x.size(1))
        out = self.norm(out)  # (B, H, T, d_head)
        if head_mask is not None:
            out = out * head_mask.reshape(-1, self.n_heads, 1, 1)  # (B, H, T, d_head)
        out = out.transpose(1, 2).flatten(2)  # (B, T, D)
        record("merged", out, "B T D", "heads, normalised, concatenated")
        return self.out_proj(out * F.silu(self.gate_proj(x))), None  # (B, T, D)
