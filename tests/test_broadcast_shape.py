"""attnbook.core._checks.broadcast_shape: PyTorch's broadcasting rule, written out.

It replaces ``torch.broadcast_shapes`` (whose first call imports sympy), so it must agree with
it on every shape pair and triple, including sizes 0 and 1 and different ranks.
"""

import itertools

import pytest
import torch

from attnbook.core._checks import broadcast_shape

SHAPES = [(), (1,), (0,), (3,), (2, 1), (1, 3), (2, 3), (4, 1, 3), (2, 0), (1, 1, 1)]


def torch_broadcast(*shapes):
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        return None


@pytest.mark.parametrize("count", [1, 2, 3])
def test_it_agrees_with_torch_on_every_combination(count):
    for shapes in itertools.product(SHAPES, repeat=count):
        assert broadcast_shape(*shapes) == torch_broadcast(*shapes), shapes


def test_it_returns_a_torch_size_or_none():
    assert broadcast_shape((2, 1), (3,)) == torch.Size([2, 3])
    assert isinstance(broadcast_shape((2, 1), (3,)), torch.Size)
    assert broadcast_shape((2,), (3,)) is None
