"""RoPE frequencies with context-extension scaling, against the formulas of each method.

References are written here in plain Python floats from the papers and from the formulas in
transformers' ``modeling_rope_utils`` (read, not imported): position interpolation (Chen et
al., 2023), dynamic NTK-aware scaling (bloc97, 2023), YaRN (Peng et al., 2023) and Llama 3.1's.
"""

import math

import pytest
import torch
from helpers import raises

from attnbook.core.positions import apply_rope, rope_angles, rope_frequencies

DIM, BASE = 64, 10000.0


def plain(dim=DIM, base=BASE):
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def yarn_reference(dim, base, factor, original, beta_fast=32, beta_slow=1, truncate=True):
    def pair(turns):
        return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair(beta_fast), pair(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    out = []
    for i, freq in enumerate(plain(dim, base)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 1: interpolate
        out.append(freq / factor * ramp + freq * (1 - ramp))
    return out


def llama3_reference(dim, base, factor, low, high, original):
    out = []
    for freq in plain(dim, base):
        wavelength = 2 * math.pi / freq
        if wavelength < original / high:
            out.append(freq)
        elif wavelength > original / low:
            out.append(freq / factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return out


def check(scaling, expected, factor=1.0, seq_len=None):
    got, got_factor = rope_frequencies(
        DIM, BASE, scaling=scaling, seq_len=seq_len, dtype=torch.float64
    )
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0)
    assert got_factor == pytest.approx(factor, rel=1e-12)


def test_plain_and_linear_frequencies():
    check(None, plain())
    check({"rope_type": "linear", "factor": 4.0}, [f / 4 for f in plain()])


def test_dynamic_ntk_grows_the_base_only_past_the_original_length():
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 128}
    check(scaling, plain(), seq_len=100)
    check(scaling, plain(), seq_len=128)
    grown = BASE * (4.0 * 512 / 128 - 3.0) ** (DIM / (DIM - 2))
    check(scaling, plain(base=grown), seq_len=512)


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_frequencies_and_attention_factor(truncate):
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 256}
    scaling["truncate"] = truncate
    expected = yarn_reference(DIM, BASE, 8.0, 256, truncate=truncate)
    check(scaling, expected, factor=0.1 * math.log(8.0) + 1)
    custom = {**scaling, "attention_factor": 1.5, "beta_fast": 16.0, "beta_slow": 2.0}
    check(custom, yarn_reference(DIM, BASE, 8.0, 256, 16, 2, truncate), factor=1.5)


def test_yarn_keeps_fast_pairs_and_divides_slow_ones():
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 256}
    freqs, _ = rope_frequencies(DIM, BASE, scaling=scaling, dtype=torch.float64)
    reference = torch.tensor(plain(), dtype=torch.float64)
    assert freqs[0] == reference[0]
    assert freqs[-1] == pytest.approx(reference[-1].item() / 8, rel=1e-12)


def test_llama3_frequencies():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    got, _ = rope_frequencies(128, 500000.0, scaling=scaling, dtype=torch.float64)
    expected = llama3_reference(128, 500000.0, 8.0, 1.0, 4.0, 8192)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0)
    # all three regimes occur: kept, blended and stretched pairs
    ratio = got / torch.tensor(plain(128, 500000.0), dtype=torch.float64)
    assert ratio.max() == 1 and ratio.min() == pytest.approx(1 / 8)
    assert ((ratio > 1 / 8 + 1e-9) & (ratio < 1 - 1e-9)).any()


def test_angles_and_rotation_use_the_scaled_frequencies():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    positions = torch.arange(10)
    freqs = torch.tensor(yarn_reference(DIM, BASE, 4.0, 64), dtype=torch.float64)
    angles = rope_angles(positions, DIM, BASE, torch.float64, scaling=scaling)
    torch.testing.assert_close(angles, positions[:, None].double() * freqs, rtol=1e-12, atol=0)
    x = torch.randn(10, DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rotated = apply_rope(x, positions, BASE, layout="halves", scaling=scaling)
    factor = 0.1 * math.log(4.0) + 1
    first, second = x[:, : DIM // 2], x[:, DIM // 2 :]
    cos, sin = angles.cos() * factor, angles.sin() * factor
    expected = torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
    torch.testing.assert_close(rotated, expected, rtol=1e-12, atol=1e-12)


def test_dynamic_angles_read_the_longest_position():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    positions = torch.arange(40)
    grown = BASE * (2.0 * 40 / 16 - 1.0) ** (DIM / (DIM - 2))
    expected = positions[:, None].double() * torch.tensor(plain(base=grown), dtype=torch.float64)
    got = rope_angles(positions, DIM, BASE, torch.float64, scaling=scaling)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ("linear", "scaling: expected None or a dict with a 'rope_type', got 'linear'"),
        ({"rope_type": "ntk", "factor": 2.0}, "scaling['rope_type']: expected one of"),
        ({"rope_type": "linear"}, "missing ['factor']"),
        ({"rope_type": "linear", "factor": 2.0, "mscale": 1.0}, "not understood ['mscale']"),
        (
            {"rope_type": "linear", "factor": 0.5},
            "scaling['factor']: expected a finite number >= 1",
        ),
        ({"rope_type": "linear", "factor": float("nan")}, "scaling['factor']: expected a finite"),
        (
            {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 0},
            "scaling['original_max_position_embeddings']: expected a positive int, got 0",
        ),
        (
            {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "truncate": 0,
            },
            "scaling['truncate']: expected True or False, got 0",
        ),
        (
            {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 1,
            },
            "beta_fast (default 32) must exceed beta_slow",
        ),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            },
            "high_freq_factor must exceed low_freq_factor",
        ),
    ],
)
def test_bad_scaling_is_refused_naming_the_argument(scaling, message):
    with raises(message):
        rope_frequencies(DIM, scaling=scaling)


def test_dynamic_needs_a_sequence_length():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    with raises("seq_len: expected a positive int, got None"):
        rope_frequencies(DIM, scaling=scaling)
