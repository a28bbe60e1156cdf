"""Mean ablation of heads (chapter 13): checked against hooks on the output projection."""

import pytest
import torch
import torch.nn.functional as F

from attnbook import TinyDecoder
from attnbook.analysis.head_analysis import ablation_increase
from attnbook.analysis.mean_ablation import mean_ablated_losses, mean_ablation_increase


def small_model(attention_only=False):
    torch.manual_seed(0)
    options = {"d_model": 12, "n_heads": 3, "n_layers": 3, "max_len": 7}
    return TinyDecoder(6, attention_only=attention_only, **options).double().eval()


def batch(windows=4, length=7):
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(6, (windows, length + 1), generator=generator)  # (B, T + 1)
    return tokens[:, :-1], tokens[:, 1:]


def loss(model, inputs, targets):
    logits = model(inputs)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


@torch.no_grad()
def by_hooks(model, inputs, targets):
    """The same measure through forward pre-hooks on every output projection, full passes."""
    merged = {}
    hooks = [
        block.attention.out_proj.register_forward_pre_hook(
            lambda _module, args, layer=layer: merged.__setitem__(layer, args[0])
        )
        for layer, block in enumerate(model.blocks)
    ]
    base = loss(model, inputs, targets)
    for hook in hooks:
        hook.remove()
    n_heads = model.blocks[0].attention.n_heads
    increase = torch.zeros(len(model.blocks), n_heads, dtype=torch.float64)
    for layer, block in enumerate(model.blocks):
        d_head = merged[layer].size(-1) // n_heads
        for head in range(n_heads):
            columns = slice(head * d_head, (head + 1) * d_head)
            mean = merged[layer][..., columns].mean(dim=(0, 1))  # (d_head,)

            def replace(_module, args, columns=columns, mean=mean):
                heads = args[0].clone()  # (B, T, H * d_head)
                heads[..., columns] = mean
                return (heads,)

            hook = block.attention.out_proj.register_forward_pre_hook(replace)
            increase[layer, head] = loss(model, inputs, targets) - base
            hook.remove()
    return increase


@pytest.mark.parametrize("attention_only", [False, True])
def test_mean_ablation_matches_a_hook_that_replaces_the_heads_columns(attention_only):
    model = small_model(attention_only)
    inputs, targets = batch()
    found = mean_ablation_increase(model, inputs, targets)
    assert found.shape == (3, 3)
    torch.testing.assert_close(found, by_hooks(model, inputs, targets), rtol=0, atol=1e-12)


def test_one_window_of_one_position_is_its_own_mean():
    model = small_model()
    inputs, targets = batch(windows=1, length=1)
    found = mean_ablation_increase(model, inputs, targets)
    torch.testing.assert_close(found, torch.zeros(3, 3, dtype=torch.float64), rtol=0, atol=1e-12)


def test_mean_ablation_is_not_zero_ablation():
    model = small_model()
    inputs, targets = batch()
    mean = mean_ablation_increase(model, inputs, targets)
    zero = ablation_increase(model, inputs, targets)
    assert (mean - zero).abs().max() > 1e-3


def test_mean_ablation_checks_its_windows_first():
    model = small_model()
    inputs, targets = batch()
    with pytest.raises(ValueError, match="targets: expected shape"):
        mean_ablation_increase(model, inputs, targets[:, :-1])
    with pytest.raises(ValueError, match="targets: expected ids"):
        mean_ablation_increase(model, inputs, targets + 6)


def test_a_subset_of_heads_gives_their_values_and_nan_elsewhere():
    model = small_model()
    inputs, targets = batch()
    every = mean_ablation_increase(model, inputs, targets)
    some = mean_ablation_increase(model, inputs, targets, heads=[(2, 1), (0, 2)])
    measured = torch.zeros(3, 3, dtype=torch.bool)
    measured[2, 1] = measured[0, 2] = True
    torch.testing.assert_close(some[measured], every[measured], rtol=0, atol=1e-12)
    assert some[~measured].isnan().all()


@pytest.mark.parametrize(
    ("heads", "message"),
    [
        ((1, 2), r"heads\[0\]: expected a \(layer, head\) pair"),
        ("01", "heads: expected a list"),
        ([(3, 0)], r"heads\[0\] layer: expected an int in \[0, 2\], got 3"),
        ([(0, -1)], r"heads\[0\] head: expected an int in \[0, 2\], got -1"),
    ],
)
def test_heads_outside_the_table_are_refused(heads, message):
    model = small_model()
    inputs, targets = batch()
    with pytest.raises(ValueError, match=message):
        mean_ablation_increase(model, inputs, targets, heads=heads)


@torch.no_grad()
def losses_by_hooks(model, inputs, targets, heads):
    """Every query's loss with the heads' columns set to their means by pre-hooks, (B, T)."""
    merged = {}
    hooks = [
        block.attention.out_proj.register_forward_pre_hook(
            lambda _module, args, layer=layer: merged.__setitem__(layer, args[0])
        )
        for layer, block in enumerate(model.blocks)
    ]
    model(inputs)
    for hook in hooks:
        hook.remove()
    n_heads = model.blocks[0].attention.n_heads
    hooks = []
    for layer, block in enumerate(model.blocks):
        d_head = merged[layer].size(-1) // n_heads
        columns = [
            slice(head * d_head, (head + 1) * d_head) for where, head in heads if where == layer
        ]
        means = [merged[layer][..., c].mean(dim=(0, 1)) for c in columns]

        def replace(_module, args, columns=columns, means=means):
            heads = args[0].clone()  # (B, T, H * d_head)
            for c, mean in zip(columns, means, strict=True):
                heads[..., c] = mean
            return (heads,)

        hooks.append(block.attention.out_proj.register_forward_pre_hook(replace))
    logits = model(inputs)  # (B, T, V)
    for hook in hooks:
        hook.remove()
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


@pytest.mark.parametrize("attention_only", [False, True])
def test_sets_of_heads_match_hooks_that_replace_all_their_columns(attention_only):
    model = small_model(attention_only)
    inputs, targets = batch()
    head_sets = [[], [(1, 2)], [(0, 0), (0, 2)], [(2, 1), (0, 1), (1, 0)]]
    found = mean_ablated_losses(model, inputs, targets, head_sets)
    assert found.shape == (4, 4, 7)
    for heads, losses in zip(head_sets, found, strict=True):
        expected = losses_by_hooks(model, inputs, targets, heads)
        torch.testing.assert_close(losses, expected, rtol=0, atol=1e-12)


def test_a_set_of_one_head_averages_to_its_mean_ablation_increase():
    model = small_model()
    inputs, targets = batch()
    increase = mean_ablation_increase(model, inputs, targets)
    losses = mean_ablated_losses(model, inputs, targets, [[], [(1, 1)], [(2, 0)]])
    base = losses[0].mean()
    torch.testing.assert_close(losses[1].mean() - base, increase[1, 1], rtol=0, atol=1e-12)
    torch.testing.assert_close(losses[2].mean() - base, increase[2, 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("head_sets", "message"),
    [
        ([(0, 1)], r"heads\[0\]: expected a \(layer, head\) pair"),
        ("01", "head_sets: expected a list of lists"),
        ([[(0, 1), (0, 1)]], r"head_sets\[0\]: expected distinct \(layer, head\) pairs"),
        ([[], [(3, 0)]], r"heads\[0\] layer: expected an int in \[0, 2\], got 3"),
    ],
)
def test_bad_sets_of_heads_are_refused(head_sets, message):
    model = small_model()
    inputs, targets = batch()
    with pytest.raises(ValueError, match=message):
        mean_ablated_losses(model, inputs, targets, head_sets)
