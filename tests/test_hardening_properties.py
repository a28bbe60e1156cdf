"""Properties of positions, head statistics and the explorer's payload, searched with hypothesis.

Issue 22's own probing: for every valid input the numerics stay finite and mean what the
docstrings say; every invalid base is refused; every label survives the trip into the page.
"""

import json
import math
import re

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import alibi_bias, apply_rope, explore, rope_angles, sinusoidal_encoding
from attnbook.analysis import head_analysis as analysis

bases = st.floats(min_value=1.0001, max_value=1e12, allow_nan=False, allow_infinity=False)
dims = st.integers(min_value=1, max_value=8).map(lambda n: 2 * n)
seeds = st.integers(min_value=0, max_value=2**16)


@settings(max_examples=40, deadline=None)
@given(base=bases, dim=dims, offset=st.integers(-(10**6), 10**6), seed=seeds)
def test_rope_keeps_lengths_and_scores_depend_only_on_the_offset(base, dim, offset, seed):
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, dim, generator=generator, dtype=torch.float64)
    positions = torch.tensor([offset], dtype=torch.float64)
    rotated = apply_rope(q, positions, base)  # (1, dim)
    assert torch.isfinite(rotated).all()
    torch.testing.assert_close(rotated.norm(), q.norm())
    here = (
        apply_rope(q, torch.tensor([7.0], dtype=torch.float64), base)
        @ apply_rope(k, torch.tensor([3.0], dtype=torch.float64), base).T
    )
    there = apply_rope(q, positions + 7, base) @ apply_rope(k, positions + 3, base).T
    torch.testing.assert_close(here, there, atol=1e-7, rtol=1e-7)


@settings(max_examples=40, deadline=None)
@given(base=bases, dim=dims, start=st.integers(0, 10**6), length=st.integers(1, 6))
def test_encodings_are_points_on_unit_circles_for_every_base(base, dim, start, length):
    positions = torch.arange(start, start + length)
    encoding = sinusoidal_encoding(positions, dim, base, dtype=torch.float64)  # (T, dim)
    pairs = encoding.reshape(length, dim // 2, 2)
    torch.testing.assert_close(
        pairs.pow(2).sum(-1), torch.ones(length, dim // 2, dtype=torch.float64)
    )
    angles = rope_angles(positions, dim, base, dtype=torch.float64)  # (T, dim/2)
    assert torch.isfinite(angles).all() and (angles[:, 1:] <= angles[:, :-1]).all()


@settings(max_examples=30, deadline=None)
@given(
    base=st.one_of(
        st.floats(max_value=1.0),
        st.just(float("inf")),
        st.just(float("nan")),
        st.text(max_size=4),
        st.integers(max_value=1),
    )
)
def test_every_base_at_most_one_or_not_a_finite_number_is_refused(base):
    positions = torch.arange(3)
    for call in (
        lambda: rope_angles(positions, 4, base),
        lambda: sinusoidal_encoding(positions, 4, base),
        lambda: apply_rope(torch.zeros(3, 4), positions, base),
    ):
        try:
            call()
        except ValueError as error:
            assert str(error).startswith("base: expected a finite number > 1")
        else:
            raise AssertionError(f"base {base!r} was accepted")


@settings(max_examples=30, deadline=None)
@given(
    n_heads=st.integers(1, 12),
    query_len=st.integers(1, 6),
    extra=st.integers(0, 4),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
)
def test_alibi_is_minus_inf_exactly_in_the_future_and_finite_elsewhere(
    n_heads, query_len, extra, dtype
):
    bias = alibi_bias(n_heads, query_len, query_len + extra, dtype=dtype)  # (H, T, S)
    query_pos = torch.arange(extra, extra + query_len)[:, None]
    future = torch.arange(query_len + extra)[None, :] > query_pos  # (T, S)
    assert bias.dtype == dtype and torch.equal(torch.isneginf(bias), future.expand_as(bias))
    assert torch.isfinite(bias[:, ~future]).all() and (bias[:, ~future] <= 0).all()


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 3), min_size=1, max_size=10),
    seed=seeds,
    n_heads=st.integers(1, 3),
)
def test_head_statistics_are_shares_and_entropies_of_real_weights(tokens, seed, n_heads):
    length = len(tokens)
    tokens = torch.tensor([tokens])  # (B, T)
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, 1, n_heads, length, length, generator=generator, dtype=torch.float64)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (L, B, H, T, T)
    statistics = analysis.head_statistics(weights, tokens, list(" ab."))
    for name, value in statistics.items():
        assert value.shape == (1, n_heads) and torch.isfinite(value).all(), name
    for name in analysis.ROLES:
        assert ((statistics[name] >= 0) & (statistics[name] <= 1 + 1e-12)).all(), name
    assert (statistics["entropy"] >= -1e-12).all()
    assert (statistics["entropy"] <= math.log(length) + 1e-9).all()
    assert len(analysis.name_roles(statistics)[0]) == n_heads


label_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30
)  # any valid Unicode: no lone surrogates


@settings(max_examples=40, deadline=None)
@given(
    queries=st.lists(label_text, min_size=1, max_size=4),
    title=st.one_of(st.none(), label_text),
    frames=st.lists(label_text, min_size=1, max_size=3),
    seed=seeds,
)
def test_every_valid_label_reaches_the_page_as_given_and_the_weights_round_trip(
    queries, title, frames, seed
):
    length = len(queries)
    generator = torch.Generator().manual_seed(seed)
    weights = torch.rand(len(frames), length, length, generator=generator, dtype=torch.float64)
    weights = weights * 10 ** torch.randint(-3, 12, (len(frames), 1, 1), generator=generator)
    explorer = explore(weights, queries, title=title, frame_labels=frames)
    data_element = re.search(
        r'<script type="application/json" class="attnx-data">(.*?)</script>', explorer.html, re.S
    ).group(1)
    assert "<" not in data_element and "&" not in data_element
    data = json.loads(data_element)
    assert (data["queryTokens"], data["title"], data["frameLabels"]) == (queries, title, frames)
    embedded = torch.tensor(data["weights"], dtype=torch.float64).reshape(weights.shape) / 1000
    torch.testing.assert_close(embedded, weights, atol=5e-4 + 1e-9, rtol=1e-15)
    assert explorer.html == explore(weights, queries, title=title, frame_labels=frames).html
