"""causal_mask and padding_mask build boolean masks with True = attend."""

import torch

from attnbook import causal_mask, padding_mask


def test_causal_mask_square_is_lower_triangular():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_alignments_agree_when_square_and_differ_otherwise():
    assert torch.equal(causal_mask(5, 5), causal_mask(5, 5, align="bottom-right"))
    top_left, bottom_right = causal_mask(2, 4), causal_mask(2, 4, align="bottom-right")
    assert top_left.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert bottom_right.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_causal_row_t_counts_t_plus_one_keys():
    mask = causal_mask(6)
    assert mask.sum(dim=-1).tolist() == [1, 2, 3, 4, 5, 6]
    assert int(mask.sum()) == 6 * 7 // 2


def test_padding_mask_right_and_left():
    assert padding_mask([3, 1], 4).tolist() == [
        [True, True, True, False],
        [True, False, False, False],
    ]
    assert padding_mask(torch.tensor([3, 0]), 4, side="left").tolist() == [
        [False, True, True, True],
        [False, False, False, False],
    ]


def test_padding_mask_combines_with_causal_by_broadcasting():
    keep = padding_mask([2, 3], 3)[:, None, :] & causal_mask(3)  # (B, T, S)
    assert keep.shape == (2, 3, 3)
    assert keep[0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
