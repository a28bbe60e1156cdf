"""A quantized KV cache: keys int8 per channel, values int8 per token (KIVI's split).

Keys have a few channels whose values are large for every token, so KIVI (Liu et al., 2024)
quantizes keys *per channel*: one scale and zero point per feature, shared over the tokens of
a group; values have no such channels and are quantized *per token*. :func:`quantize` maps a
float tensor to int8 codes with an asymmetric scale and zero point along one dimension;
:class:`QuantizedKV` stores one layer's keys and values that way, and :func:`attention_error`
measures what the rounding costs in the attention output. KIVI itself goes down to 2 bits and
keeps the newest tokens in full precision; 8 bits (the default) keep this small and exact
enough to check, and ``bits`` from 2 to 8 gives the coarser codes (still held one per int8).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from attnbook.core._checks import check_floating, check_int, check_tensor
from attnbook.core.attention import attend

LEVELS = 255  # int8 codes -128..127: 2**8 - 1 steps


@dataclass
class Quantized:
    """int8 ``codes`` with float ``scale`` and ``zero``: x ~ (code + 128) * scale + zero.

    ``bits`` says how many of the codes' 8 bits are used (codes from -128 to 2**bits - 129).
    """

    codes: Tensor
    scale: Tensor
    zero: Tensor
    bits: int = 8

    def dequantize(self) -> Tensor:
        return (self.codes.to(self.scale.dtype) + 128) * self.scale + self.zero

    @property
    def nbytes(self) -> int:
        """Bytes with the codes packed ``bits`` to an entry (as a kernel stores them), plus
        the float scales and zero points; at 8 bits exactly what the tensors hold."""
        codes = -(-self.codes.numel() * self.bits // 8)
        return codes + sum(t.numel() * t.element_size() for t in (self.scale, self.zero))


def quantize(x: Tensor, dim: int, bits: int = 8) -> Quantized:
    """Asymmetric quantization of ``x`` to ``bits`` bits, one (scale, zero) per slice *across*
    ``dim``.

    The minimum and maximum are taken along ``dim``: ``dim=-2`` (over tokens) gives one pair
    per channel, ``dim=-1`` (over features) one pair per token. The range is cut into
    2**bits - 1 steps (255 at 8 bits, 3 at 2 bits), and the error of each entry is at most
    half a step.
    """
    check_floating("x", x)
    check_int("bits", bits, low=2, high=8)
    levels = 2**bits - 1
    low = x.amin(dim=dim, keepdim=True)
    high = x.amax(dim=dim, keepdim=True)
    scale = ((high - low) / levels).clamp_min(torch.finfo(x.dtype).tiny)
    codes = torch.round((x - low) / scale).clamp(0, levels) - 128
    return Quantized(codes.to(torch.int8), scale, low, bits)


@dataclass
class QuantizedKV:
    """One layer's keys (per channel) and values (per token), (B, H_kv, S, d_head) each."""

    keys: Quantized
    values: Quantized

    @classmethod
    def from_float(cls, keys: Tensor, values: Tensor, *, bits: int = 8) -> "QuantizedKV":
        check_tensor("keys", keys, "(B, H_kv, S, d_head)", rank=4)
        check_tensor("values", values, "(B, H_kv, S, d_head)", rank=4)
        return cls(quantize(keys, -2, bits), quantize(values, -1, bits))

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes


def attention_error(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    *,
    key_dim: int = -2,
    value_dim: int = -1,
    bits: int = 8,
) -> float:
    """Max |attention(q, K~, V~) - attention(q, K, V)| / max |attention(q, K, V)|.

    K~ and V~ are ``bits``-bit round trips quantized along ``key_dim`` and ``value_dim`` (the
    defaults are KIVI's: keys per channel, values per token). Full, non-causal attention of
    q (B, H, T, d_head) over all S cached positions.
    """
    check_int("key_dim", -key_dim, high=2)
    check_int("value_dim", -value_dim, high=2)
    exact, _ = attend(q, keys, values)  # (B, H, T, d_head)
    k_round = quantize(keys, key_dim, bits).dequantize()  # (B, H_kv, S, d_head)
    v_round = quantize(values, value_dim, bits).dequantize()  # (B, H_kv, S, d_head)
    approx, _ = attend(q, k_round, v_round)  # (B, H, T, d_head)
    return ((approx - exact).abs().max() / exact.abs().max()).item()
