"""The memory-efficient backward pass of tiled attention (attnbook.efficient.tiled._TiledAttention).

Gradients are compared with float64 autograd through PyTorch's SDPA (or, where SDPA has no
defined answer, through the library's explicit attention), and checked by gradcheck.
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import TOLERANCES, seeded_tensors

import attnbook.layers.multihead
from attnbook import TensorMemoryMeter, TinyDecoder, scaled_dot_product_attention, tiled_attention
from attnbook.efficient.tiled import _TiledAttention


def leaves(*tensors, dtype=torch.float64):
    return [t.detach().to(dtype).requires_grad_() for t in tensors]


def gradients(function, inputs, grad_output):
    output = function(*inputs)
    grads = torch.autograd.grad(output, inputs, grad_output.to(output.dtype))
    return output, grads


def sdpa_mask(T, S, align):
    """The boolean (T, S) causal mask for SDPA, top-left or bottom-right aligned."""
    offset = 0 if align == "top-left" else S - T
    return torch.arange(S)[None, :] <= torch.arange(T)[:, None] + offset


# (name, shapes of q, k, v, mask maker, tiled keyword arguments)
CASES = [
    ("plain", ((2, 3, 9, 4), (2, 3, 13, 4), (2, 3, 13, 5)), None, {}),
    ("causal square", ((1, 2, 11, 4), (1, 2, 11, 4), (1, 2, 11, 3)), "top-left", {}),
    ("causal T<S top-left", ((1, 2, 6, 4), (1, 2, 13, 4), (1, 2, 13, 3)), "top-left", {}),
    ("causal T<S bottom-right", ((1, 2, 6, 4), (1, 2, 13, 4), (1, 2, 13, 3)), "bottom-right", {}),
    ("causal T>S top-left", ((1, 2, 13, 4), (1, 2, 6, 4), (1, 2, 6, 3)), "top-left", {}),
    ("broadcast batch", ((2, 3, 7, 4), (1, 3, 10, 4), (2, 1, 10, 5)), None, {}),
    ("bool mask", ((2, 2, 7, 4), (2, 2, 10, 4), (2, 2, 10, 3)), "bool", {}),
    ("float mask", ((2, 2, 7, 4), (2, 2, 10, 4), (2, 2, 10, 3)), "float", {}),
    ("scale", ((1, 2, 7, 4), (1, 2, 9, 4), (1, 2, 9, 3)), None, {"scale": 0.3}),
]


def case_tensors(case, seed):
    _, shapes, mask_kind, _ = case
    query, key, value, grad_output = seeded_tensors(
        *shapes,
        (*torch.broadcast_shapes(shapes[0][:-2], shapes[2][:-2]), shapes[0][-2], shapes[2][-1]),
        seed=seed,
        dtype=torch.float64,
    )
    T, S = shapes[0][-2], shapes[1][-2]
    generator = torch.Generator().manual_seed(seed + 100)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(2, 1, T, S, generator=generator) > 0.4
        mask[..., 0] = True  # every row sees at least one key (SDPA gives NaN otherwise)
    elif mask_kind == "float":
        mask = torch.randn(T, S, generator=generator, dtype=torch.float64)
    return query, key, value, grad_output, mask


def run_case(case, seed, dtype):
    name, shapes, mask_kind, options = case
    query, key, value, grad_output, mask = case_tensors(case, seed)
    T, S = shapes[0][-2], shapes[1][-2]
    tiled_options = dict(options, block_q=4, block_k=3)
    reference_mask = mask
    if mask_kind in ("top-left", "bottom-right"):
        tiled_options.update(is_causal=True, causal_align=mask_kind)
        reference_mask = sdpa_mask(T, S, mask_kind)
    elif mask is not None:
        tiled_options["mask"] = mask.to(dtype) if mask.dtype.is_floating_point else mask
        reference_mask = tiled_options["mask"].to(torch.float64) if mask_kind == "float" else mask
    ours = gradients(
        lambda q, k, v: tiled_attention(q, k, v, **tiled_options),
        leaves(query, key, value, dtype=dtype),
        grad_output,
    )
    expected = gradients(
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=reference_mask, scale=options.get("scale")
        ),
        leaves(query, key, value),
        grad_output,
    )
    return ours, expected


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradients_equal_float64_sdpa(case):
    (output, grads), (expected_output, expected_grads) = run_case(case, 0, torch.float64)
    torch.testing.assert_close(output, expected_output)
    for name, ours, theirs in zip("qkv", grads, expected_grads, strict=True):
        assert ours.shape == theirs.shape, name
        torch.testing.assert_close(ours, theirs, msg=lambda m, n=name: f"d{n}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_gradients_are_computed_in_float32(dtype):
    case = CASES[1]  # causal, square
    (_, grads), (_, expected_grads) = run_case(case, 1, dtype)
    tolerance = {torch.float32: TOLERANCES[torch.float32]}.get(dtype, TOLERANCES[dtype])
    for ours, theirs in zip(grads, expected_grads, strict=True):
        assert ours.dtype == dtype
        torch.testing.assert_close(ours.double(), theirs, **tolerance)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"is_causal": True},
        {"is_causal": True, "causal_align": "bottom-right"},
        {"mask": torch.tensor([[True, False, True, True, False]] * 4)},
    ],
)
def test_gradcheck_in_float64(options):
    query, key, value = leaves(*seeded_tensors((1, 2, 4, 3), (1, 2, 5, 3), (1, 2, 5, 2), seed=2))
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, block_q=3, block_k=2, **options),
        (query, key, value),
    )


def test_rows_with_nothing_to_attend_to_get_zero_output_and_zero_gradient():
    query, key, value = leaves(*seeded_tensors((1, 2, 6, 4), (1, 2, 8, 4), (1, 2, 8, 3), seed=3))
    mask = torch.rand(6, 8, generator=torch.Generator().manual_seed(0)) > 0.5
    mask[2] = False  # query 2 sees nothing
    blocked = torch.zeros(6, 8, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    for this_mask in (mask, blocked):
        output = tiled_attention(query, key, value, this_mask, block_q=4, block_k=3)
        assert torch.equal(output[..., 2, :], torch.zeros(1, 2, 3, dtype=torch.float64))
        grads = torch.autograd.grad(output.square().sum(), (query, key, value))
        assert all(torch.isfinite(g).all() for g in grads)
        assert torch.equal(grads[0][..., 2, :], torch.zeros(1, 2, 4, dtype=torch.float64))
        expected = torch.autograd.grad(
            scaled_dot_product_attention(query, key, value, mask)[0].square().sum(),
            (query, key, value),
        )  # the library's explicit attention: also zero for empty rows
        for ours, theirs in zip(grads, expected, strict=True):
            torch.testing.assert_close(ours, theirs)


def test_the_backward_never_holds_a_scores_sized_tensor():
    query, key, value = leaves(
        *seeded_tensors((1, 2, 512, 16), (1, 2, 512, 16), (1, 2, 512, 16)), dtype=torch.float32
    )
    score_bytes = 2 * 512 * 512 * 4  # one (B, H, T, S) float32 tensor
    output = tiled_attention(query, key, value, is_causal=True, block_q=64, block_k=64)
    assert type(output.grad_fn).__name__ == f"{_TiledAttention.__name__}Backward"
    with TensorMemoryMeter() as meter:
        output.sum().backward()
    assert meter.peak_bytes < score_bytes / 4
    with TensorMemoryMeter() as meter:
        scaled_dot_product_attention(query, key, value, is_causal=True)[0].sum().backward()
    assert meter.peak_bytes > 2 * score_bytes  # the explicit backward holds several


def tiled_attend(
    q,
    k,
    v,
    mask=None,
    *,
    is_causal=False,
    dropout_p=0.0,
    need_weights=False,
    logit_softcap=None,
    scale=None,
):
    """The modules' attention step with tiled attention (MHA, no dropout, weights or cap)."""
    assert not need_weights and dropout_p == 0.0 and logit_softcap is None
    tiled = tiled_attention(q, k, v, mask, is_causal=is_causal, scale=scale, block_q=8, block_k=8)
    return tiled, None


def train_losses(steps=6):
    torch.manual_seed(0)
    model = TinyDecoder(20, d_model=16, n_heads=2, n_layers=2, max_len=24)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, 20, (4, 25), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_training_with_tiled_attention_gives_the_losses_of_sdpa(monkeypatch):
    with_sdpa = train_losses()
    monkeypatch.setattr(attnbook.layers.multihead, "attend", tiled_attend)
    with_tiled = train_losses()
    assert with_sdpa[-1] < with_sdpa[0] - 0.1  # it learns
    torch.testing.assert_close(with_tiled, with_sdpa, rtol=1e-5, atol=1e-5)
