"""A linear-attention layer: Gated DeltaNet's layer with the plain running sum as its memory.

Same projections, short convolution, output norm and gate as :class:`attnbook.GatedDeltaNet`,
so that a comparison of the two isolates the rule that writes the memory: here
S_t = S_{t-1} + phi(k_t) v_t^T, normalised (Katharopoulos et al., 2020, elu(x) + 1), with no
decay and no correction.
"""

from torch import Tensor

from attnbook.linear.gated_deltanet import GatedDeltaNet
from attnbook.linear.linear_attention import linear_attention

NO_DECODING = "cache: LinearAttentionLayer has no decoding path; use GatedDeltaNet"


class LinearAttentionLayer(GatedDeltaNet):
    """Causal linear attention in a layer; ``alpha``, ``beta``, ``A_log`` and ``dt_bias`` unused.

    For training and whole-sequence evaluation: passing a ``cache`` raises ``ValueError``
    (decoding is :class:`attnbook.GatedDeltaNet`'s).
    """

    def __init__(self, d_model: int, n_heads: int, *, conv_kernel: int = 4, chunk_size: int = 64):
        super().__init__(d_model, n_heads, conv_kernel=conv_kernel, chunk_size=chunk_size)
        del self.a_proj, self.b_proj, self.A_log, self.dt_bias

    def new_cache(self):
        raise ValueError(NO_DECODING)

    def forward(self, x: Tensor, **options) -> tuple[Tensor, None]:
        if options.get("cache") is not None:
            raise ValueError(NO_DECODING)
        return super().forward(x, **options)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor | None):
        # (B, H, T, d_head)
        out = linear_attention(q, k, v, form="chunked", chunk_size=self.chunk_size)
        return out, None
