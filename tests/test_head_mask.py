"""Head gates (Michel et al., 2019): head_mask on every attention module and on TinyDecoder."""

import re

import pytest
import torch
from helpers import seeded_randn

from attnbook import GroupedQueryAttention, MultiHeadLatentAttention, TinyDecoder

D_MODEL, N_HEADS = 16, 4
HEAD_DIM = D_MODEL // N_HEADS


def modules(dtype=torch.float32):
    torch.manual_seed(0)
    return {
        "MHA": GroupedQueryAttention(D_MODEL, N_HEADS, N_HEADS),
        "GQA": GroupedQueryAttention(D_MODEL, N_HEADS, 2),
        "MLA": MultiHeadLatentAttention(D_MODEL, N_HEADS, 6, rope_dim=4, bias=True),
    }


def run(module, x, **keywords):
    return module.eval()(x, is_causal=True, **keywords)[0]  # (B, T, D)


@pytest.mark.parametrize("name", ["MHA", "GQA", "MLA"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_all_ones_is_exactly_no_mask(name, need_weights):
    module, x = modules()[name], seeded_randn(2, 5, D_MODEL)
    plain = run(module, x, need_weights=need_weights)
    gated = run(module, x, need_weights=need_weights, head_mask=torch.ones(N_HEADS))
    assert torch.equal(plain, gated)


@pytest.mark.parametrize("name", ["MHA", "GQA", "MLA"])
@pytest.mark.parametrize("head", range(N_HEADS))
def test_zeroing_a_head_zeroes_its_slice_before_the_output_projection(name, head):
    module, x = modules()[name], seeded_randn(2, 5, D_MODEL)
    merged = {}
    hook = module.out_proj.register_forward_pre_hook(lambda _, args: merged.update(x=args[0]))
    run(module, x)
    hook.remove()
    expected_input = merged["x"].clone()  # (B, T, D): heads concatenated
    expected_input[..., head * HEAD_DIM : (head + 1) * HEAD_DIM] = 0
    gates = torch.ones(N_HEADS)
    gates[head] = 0
    torch.testing.assert_close(
        run(module, x, head_mask=gates), module.out_proj(expected_input), rtol=0, atol=1e-6
    )


def test_absorbed_latent_attention_takes_the_same_gates():
    module, x = modules()["MLA"].eval(), seeded_randn(2, 5, D_MODEL)
    gates = torch.tensor([[1.0, 0.0, 0.5, 2.0], [0.0, 1.0, 1.0, 0.25]])  # (B, H)
    absorbed, _ = module.absorbed_forward(x, is_causal=True, head_mask=gates)
    torch.testing.assert_close(absorbed, run(module, x, head_mask=gates))


@pytest.mark.parametrize("name", ["MHA", "GQA", "MLA"])
def test_per_item_gates_act_on_their_own_batch_item(name):
    module, x = modules()[name], seeded_randn(2, 5, D_MODEL)
    gates = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # (B, H)
    both = run(module, x, head_mask=gates)
    for item in range(2):
        alone = run(module, x[item : item + 1], head_mask=gates[item])
        torch.testing.assert_close(both[item : item + 1], alone)


@pytest.mark.parametrize("name", ["MHA", "GQA", "MLA"])
def test_gradient_of_the_gates_equals_a_finite_difference(name):
    module = modules()[name].double()
    x = seeded_randn(1, 4, D_MODEL).double()
    weights = seeded_randn(1, 4, D_MODEL, seed=2).double()  # a fixed linear "loss"
    gates = torch.tensor([1.0, 0.5, 0.0, 1.5], dtype=torch.float64, requires_grad=True)
    (run(module, x, head_mask=gates) * weights).sum().backward()
    step = 1e-6
    for head in range(N_HEADS):
        delta = torch.zeros(N_HEADS, dtype=torch.float64)
        delta[head] = step
        with torch.no_grad():
            up = (run(module, x, head_mask=gates + delta) * weights).sum()
            down = (run(module, x, head_mask=gates - delta) * weights).sum()
        assert gates.grad[head].item() == pytest.approx(((up - down) / (2 * step)).item(), rel=1e-6)


@pytest.mark.parametrize(
    ("head_mask", "message"),
    [
        (
            torch.ones(3),
            "head_mask: expected shape (H,) = (4,) or (B, H) = (2, 4), got head_mask.shape = (3,)",
        ),
        (torch.ones(2, 1, 4), "head_mask: expected shape (H,) = (4,) or (B, H) = (2, 4)"),
        (torch.ones(4, dtype=torch.long), "head_mask: expected dtype torch.float32 as the inputs"),
        ([1.0, 1.0, 1.0, 1.0], "head_mask: expected a tensor of shape (H,) or (B, H), got list"),
    ],
)
@pytest.mark.parametrize("name", ["GQA", "MLA"])
def test_bad_gates_are_refused(name, head_mask, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        run(modules()[name], seeded_randn(2, 5, D_MODEL), head_mask=head_mask)


def test_tiny_decoder_gates_each_layer_with_its_row():
    torch.manual_seed(0)
    model = TinyDecoder(11, d_model=D_MODEL, n_heads=N_HEADS, n_layers=2, max_len=8).eval()
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(model(tokens), model(tokens, head_mask=torch.ones(2, N_HEADS)))
    gates = torch.ones(2, N_HEADS)
    gates[1, 2] = 0
    captured = {}
    hook = model.blocks[1].attention.register_forward_hook(
        lambda module, args, kwargs, output: captured.update(mask=kwargs["head_mask"]),
        with_kwargs=True,
    )
    model(tokens, head_mask=gates)
    hook.remove()
    assert torch.equal(captured["mask"], gates[1])
    assert not torch.equal(model(tokens), model(tokens, head_mask=gates))
    with pytest.raises(ValueError, match=re.escape("head_mask: expected shape (L, H) = (2, 4)")):
        model(tokens, head_mask=torch.ones(N_HEADS))
