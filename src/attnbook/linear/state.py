"""The decoding state of a Gated DeltaNet layer: fixed-size, however many tokens it has seen.

Where a softmax layer's :class:`attnbook.KVCache` grows by a key and a value per token, a
:class:`RecurrentState` holds the delta rule's memory S (B, H, d_k, d_v) and the last
``kernel - 1`` inputs of the short convolution (B, kernel - 1, channels): the same bytes at
token 10 as at token 100 000.
"""

from torch import Tensor


class RecurrentState:
    """One Gated DeltaNet layer's state for decoding; ``len()`` is the number of tokens seen.

    ``memory`` (B, H, d_k, d_v) and ``conv_inputs`` (B, kernel - 1, channels) are None until the
    layer's first call with this state, which sets them (see :class:`attnbook.GatedDeltaNet`).
    """

    def __init__(self) -> None:
        self.memory: Tensor | None = None
        self.conv_inputs: Tensor | None = None
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        shape = None if self.memory is None else tuple(self.memory.shape)
        return f"RecurrentState(tokens={self.length}, memory of shape {shape}, {self.nbytes} bytes)"

    @property
    def nbytes(self) -> int:
        """Bytes held: the memory and the convolution's inputs (numel * element size)."""
        held = [t for t in (self.memory, self.conv_inputs) if t is not None]
        return sum(t.numel() * t.element_size() for t in held)

    def update(self, memory: Tensor, conv_inputs: Tensor, new_tokens: int) -> None:
        """Replace the state by the one after ``new_tokens`` more tokens."""
        self.memory, self.conv_inputs = memory, conv_inputs
        self.length += new_tokens
