"""attnbook.book.explore: shapes accepted and refused, embedded weights, deterministic offline HTML.

The explorer's behaviour in a browser (hover, head selector, keys) is checked on the built book
by tests/test_browser.py; here the HTML is checked as text.
"""

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from attnbook import explore
from attnbook.book.explore import MAX_CELLS

ROOT = Path(__file__).resolve().parents[1]
SIZE_LIMIT = 300_000  # bytes of one explorer's HTML, for the book's uses
TOKENS = ["the", "cat", "sat", "on", "the", "mat"]
BOOK_CHAPTERS_WITH_EXPLORER = ["00_conventions", "05_multi_head", "06_gqa"]


def softmax_weights(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).softmax(dim=-1)


def payload(explorer):
    """The JSON the page reads, decoded."""
    match = re.search(
        r'<script type="application/json" class="attnx-data">(.*?)</script>',
        explorer.html,
        flags=re.S,
    )
    assert match is not None, "no data element in the explorer's HTML"
    return json.loads(match.group(1))


def explorer_outputs(notebook_path):
    """The HTML of every explorer in a notebook's saved outputs."""
    notebook = nbformat.read(notebook_path, as_version=4)
    return [
        "".join(output["data"]["text/html"])
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if 'class="attnx"' in "".join(output.get("data", {}).get("text/html", ""))
    ]


@pytest.mark.parametrize(
    ("shape", "layers_heads"),
    [((6, 6), (1, 1)), ((3, 6, 6), (1, 3)), ((2, 3, 6, 6), (2, 3))],
)
def test_accepts_every_rank(shape, layers_heads):
    explorer = explore(softmax_weights(*shape), TOKENS)
    assert explorer.shape == (*layers_heads, 6, 6)
    data = payload(explorer)
    assert (data["layers"], data["heads"], data["queries"], data["keys"]) == (*layers_heads, 6, 6)
    assert len(data["weights"]) == np.prod(shape)


def test_weights_embedded_to_three_decimals_in_layer_head_query_key_order():
    weights = softmax_weights(2, 3, 4, 5)  # (L, H, T, S)
    data = payload(explore(weights, TOKENS[:4], TOKENS[:5]))
    embedded = np.array(data["weights"]).reshape(2, 3, 4, 5) / 10 ** data["decimals"]
    assert data["decimals"] == 3
    np.testing.assert_allclose(embedded, weights.numpy(), atol=5e-4 + 1e-9, rtol=0)
    assert embedded[1, 2, 3, 4] == round(weights[1, 2, 3, 4].item(), 3)


def test_tensor_with_grad_and_numpy_array_give_the_same_html():
    weights = softmax_weights(2, 6, 6).requires_grad_()
    from_tensor = explore(weights, TOKENS, title="t")
    from_array = explore(weights.detach().numpy(), TOKENS, title="t")
    from_list = explore(weights.detach().tolist(), TOKENS, title="t")
    assert from_tensor.html == from_array.html == from_list.html


def test_cross_attention_tokens_and_labels_are_carried():
    data = payload(
        explore(
            softmax_weights(2, 4, 6),
            ["le", "chat", "noir", "dort"],
            TOKENS,
            head_labels=["previous", "next"],
        )
    )
    assert data["queryTokens"] == ["le", "chat", "noir", "dort"]
    assert data["keyTokens"] == TOKENS
    assert data["headLabels"] == ["previous", "next"]
    assert data["groups"] is None


def test_kv_groups_follow_repeat_interleave():
    n_heads, n_kv_heads = 8, 2
    data = payload(explore(softmax_weights(n_heads, 6, 6), TOKENS, n_kv_heads=n_kv_heads))
    expected = torch.arange(n_kv_heads).repeat_interleave(n_heads // n_kv_heads).tolist()
    assert data["groups"] == expected == [0, 0, 0, 0, 1, 1, 1, 1]


def test_colour_scale_is_plot_attentions_viridis():
    colours = payload(explore(softmax_weights(6, 6), TOKENS))["colours"]
    assert colours[0] == "#440154" and colours[-1] == "#fde725"  # viridis' two ends


def test_html_is_deterministic_and_ids_follow_the_content():
    first = explore(softmax_weights(2, 6, 6), TOKENS, title="heads")
    again = explore(softmax_weights(2, 6, 6), TOKENS, title="heads")
    other = explore(softmax_weights(2, 6, 6, seed=1), TOKENS, title="heads")
    assert first.html == again.html
    ids = [
        re.search(r'<div class="attnx" id="(attnx-[0-9a-f]{12})"', e.html) for e in (first, other)
    ]
    assert all(ids) and ids[0].group(1) != ids[1].group(1)


def test_html_is_self_contained_with_no_url():
    html = explore(softmax_weights(2, 2, 6, 6), TOKENS, n_kv_heads=1).html
    for pattern in [r"https?:", r"//", r"\bsrc\s*=", r"\bhref\s*=", r"url\(", r"@import"]:
        assert re.search(pattern, html) is None, f"{pattern!r} found in the explorer's HTML"
    assert html.count("<script>") == 1 and html.count("<style>") == 1


def test_fallback_says_what_it_shows_and_how_to_activate_it():
    html = explore(softmax_weights(3, 6, 6), TOKENS).html
    fallback = re.search(r'<p class="attnx-fallback">(.*?)</p>', html, flags=re.S).group(1)
    assert "attention explorer" in fallback and "3 head(s)" in fallback
    assert "run this cell" in fallback and "trust the notebook" in fallback


def test_tokens_cannot_close_the_script_element():
    tokens = ["</script><b>x", "a&b", "<!--", "q"]
    explorer = explore(softmax_weights(4, 4), tokens)
    data_element = explorer.html.split('class="attnx-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data_element and "&" not in data_element
    assert payload(explorer)["queryTokens"] == tokens


def test_repr_is_short_and_deterministic():
    explorer = explore(softmax_weights(2, 3, 6, 6), TOKENS, title="two layers")
    assert repr(explorer) == (
        "AttentionExplorer(layers=2, heads=3, queries=6, keys=6, title='two layers')"
    )
    assert repr(explore(softmax_weights(6, 6), TOKENS)) == (
        "AttentionExplorer(layers=1, heads=1, queries=6, keys=6)"
    )
    assert explorer._repr_html_() == explorer.html


def test_the_cap_itself_is_accepted():
    side = int(MAX_CELLS**0.5)  # 500 x 500 = 250,000 cells
    explorer = explore(np.full((side, side), 1 / side), [str(i) for i in range(side)])
    assert explorer.shape == (1, 1, side, side)


def labels(n):
    return [str(i) for i in range(n)]


BAD_INPUTS = [  # (weights, query_tokens, keyword arguments, expected message)
    (torch.ones(6), TOKENS, {}, "weights: expected shape .* got shape \\(6,\\)"),
    (torch.ones(1, 1, 1, 6, 6), TOKENS, {}, "weights: expected shape .*\\(1, 1, 1, 6, 6\\)"),
    (torch.ones(0, 6), [], {}, "weights: expected at least one .*\\(0, 6\\)"),
    ("not weights", TOKENS, {}, "weights: expected a tensor or array"),
    (torch.ones(2, 5, 6), TOKENS, {}, "query_tokens: expected 5 labels .*\\(2, 5, 6\\).* got 6"),
    (torch.ones(6, 4), TOKENS, {}, "key_tokens: weights with shape \\(6, 4\\) have 4 keys"),
    (torch.ones(6, 4), TOKENS, {"key_tokens": ["a"]}, "key_tokens: expected 4 labels .* got 1"),
    (torch.ones(6, 6), "the cat", {}, "query_tokens: expected a list"),
    (
        torch.tensor([[0.5, float("nan")]] * 2),
        labels(2),
        {},
        "weights: expected finite .*\\(0, 1\\)",
    ),
    (torch.tensor([[1.0, float("inf")]] * 2), labels(2), {}, "weights: expected finite"),
    (torch.tensor([[1.2, -0.2]] * 2), labels(2), {}, "weights: expected non-negative .*-0.2"),
    (
        torch.ones(2, 4, 200, 200),
        labels(200),
        {},
        "weights: shape \\(2, 4, 200, 200\\) has "
        "320,000 cells, more than the explorer's cap of 250,000 .* slice it first",
    ),
    (torch.ones(6, 6, 6), TOKENS, {"n_kv_heads": 4}, "n_kv_heads: the weights have H = 6"),
    (torch.ones(6, 6, 6), TOKENS, {"n_kv_heads": 0}, "n_kv_heads: expected a positive int"),
    (torch.ones(2, 6, 6), TOKENS, {"head_labels": ["a"]}, "head_labels: expected 2 labels"),
    (torch.ones(6, 6), TOKENS, {"title": 3}, "title: expected a string or None"),
    (
        torch.tensor([[1e16, 0.0], [0.0, 1.0]]),
        labels(2),
        {},
        "weights: expected weights of at most 1e\\+12 .* got 1e\\+16 at index \\(0, 0\\)",
    ),
    (torch.full((2, 2), 1e12 + 1e6), labels(2), {}, "weights: expected weights of at most"),
    (torch.ones(2, 2, dtype=torch.complex64), labels(2), {}, "weights: expected real .* complex"),
    (np.ones((2, 2), dtype=np.complex128), labels(2), {}, "weights: expected real .* complex"),
    ([[1j, 0], [0, 1]], labels(2), {}, "weights: expected real attention weights, got complex"),
    (
        torch.ones(2, 2),
        ["a", "b\udc80"],
        {},
        "query_tokens\\[1\\]: expected text that is valid Unicode, got 'b\\\\udc80' with a lone "
        "surrogate '\\\\udc80' at character 1",
    ),
    (torch.ones(2, 2), ["a", "b"], {"key_tokens": ["\ud800", "c"]}, "key_tokens\\[0\\]: .*Unicode"),
    (torch.ones(2, 2, 2), ["a", "b"], {"head_labels": ["h", "\udfff"]}, "head_labels\\[1\\]"),
    (torch.ones(2, 2), ["a", "b"], {"title": "t\ud800"}, "title: expected text that is valid"),
    (torch.ones(1, 2, 2), ["a", "b"], {"frame_labels": ["\ud800"]}, "frame_labels\\[0\\]"),
]


@pytest.mark.parametrize(("weights", "query_tokens", "arguments", "message"), BAD_INPUTS)
def test_bad_input_names_the_argument_and_shape(weights, query_tokens, arguments, message):
    with pytest.raises(ValueError, match=message):
        explore(weights, query_tokens, **arguments)


def framed_weights(n_frames, *shape):
    """Frames that differ: frame f is softmax weights drawn with seed f."""
    return torch.stack([softmax_weights(*shape, seed=f) for f in range(n_frames)])


@pytest.mark.parametrize(
    ("shape", "layers_heads"),
    [((6, 6), (1, 1)), ((3, 6, 6), (1, 3)), ((2, 3, 6, 6), (2, 3))],
)
def test_frames_add_one_leading_axis_to_every_rank(shape, layers_heads):
    weights = framed_weights(4, *shape)  # (F, ...)
    labels = ["step 0", "step 100", "step 200", "step 800"]
    explorer = explore(weights, TOKENS, frame_labels=labels)
    assert explorer.shape == (*layers_heads, 6, 6) and explorer.frames == 4
    data = payload(explorer)
    assert (data["frames"], data["frameLabels"]) == (4, labels)
    embedded = np.array(data["weights"]).reshape(4, *layers_heads, 6, 6) / 10 ** data["decimals"]
    expected = weights.reshape(4, *layers_heads, 6, 6).numpy()
    np.testing.assert_allclose(embedded, expected, atol=5e-4 + 1e-9, rtol=0)
    assert repr(explorer).startswith("AttentionExplorer(frames=4, layers=")


def test_frame_labels_are_shown_as_given():
    labels = ["step 0", "</script><img src=x onerror=alert(1)>", "schritt 3 \u00e9\u6b65", "  "]
    explorer = explore(framed_weights(4, 6, 6), TOKENS, frame_labels=labels)
    assert payload(explorer)["frameLabels"] == labels
    data_element = explorer.html.split('class="attnx-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data_element


def test_without_frames_there_is_one_frame_and_no_slider_labels():
    explorer = explore(softmax_weights(2, 6, 6), TOKENS)
    data = payload(explorer)
    assert (explorer.frames, data["frames"], data["frameLabels"]) == (1, 1, None)
    assert "slider" not in explorer.html.split('class="attnx-fallback">', 1)[1].split("</p>")[0]


def test_one_frame_with_a_label_is_a_framed_explorer():
    explorer = explore(softmax_weights(1, 6, 6), TOKENS, frame_labels=["only"])
    assert explorer.shape == (1, 1, 6, 6) and payload(explorer)["frameLabels"] == ["only"]
    assert "a slider over 1 frame(s)" in explorer.html


def test_framed_html_is_deterministic_and_follows_the_labels():
    weights = framed_weights(3, 2, 6, 6)
    first = explore(weights, TOKENS, frame_labels=["a", "b", "c"])
    again = explore(weights.clone(), TOKENS, frame_labels=["a", "b", "c"])
    other = explore(weights, TOKENS, frame_labels=["a", "b", "d"])
    assert first.html == again.html != other.html


def test_frame_cap_counts_every_frame():
    one_frame = torch.full((4, 120, 120), 1 / 120)  # 57,600 cells: under the cap
    explore(one_frame, labels(120))
    framed = one_frame.expand(5, 4, 120, 120)  # 288,000 cells: over it
    with pytest.raises(ValueError, match="288,000 cells, .* \\(F \\* L \\* H \\* T \\* S\\)"):
        explore(framed, labels(120), frame_labels=labels(5))


BAD_FRAMES = [  # (weights, frame_labels, expected message)
    (torch.ones(3, 6, 6), ["a", "b"], "frame_labels: expected 3 labels \\(one per frame .* got 2"),
    (torch.ones(3, 6, 6), ["a"] * 4, "frame_labels: expected 3 labels .*\\(3, 6, 6\\).* got 4"),
    (torch.ones(3, 6, 6), [], "frame_labels: expected 3 labels .* got 0"),
    (torch.ones(3, 6, 6), "abc", "frame_labels: expected a list of 3 labels"),
    (torch.ones(3, 6, 6), 3, "frame_labels: expected a list of 3 labels .* got int"),
    (torch.ones(6, 6), ["a"] * 6, "weights: expected shape \\(F, T, S\\), .* got shape \\(6, 6\\)"),
    (torch.ones(1, 1, 1, 1, 6, 6), ["a"], "weights: expected shape \\(F, T, S\\)"),
    (torch.ones(0, 6, 6), [], "weights: expected at least one frame, head, query and key"),
]


@pytest.mark.parametrize(("weights", "frame_labels", "message"), BAD_FRAMES)
def test_bad_frames_name_the_argument(weights, frame_labels, message):
    with pytest.raises(ValueError, match=message):
        explore(weights, TOKENS, frame_labels=frame_labels)


def test_capstone_sized_explorer_is_small():
    causal = torch.ones(64, 64).tril().bool()  # (T, S)
    scores = torch.randn(2, 4, 64, 64, generator=torch.Generator().manual_seed(0))
    weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)  # (L, H, T, S)
    size = len(explore(weights, [f"t{i}" for i in range(64)]).html.encode())
    print(f"\n(L, H, T, S) = (2, 4, 64, 64), causal: {size / 1000:.1f} KB")
    assert size < SIZE_LIMIT


def test_book_uses_are_small():
    sizes = {}
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        for i, html in enumerate(explorer_outputs(notebook)):
            sizes[f"{notebook.stem} #{i}"] = len(html.encode())
    print("\n" + "\n".join(f"{name}: {size / 1000:.1f} KB" for name, size in sizes.items()))
    chapters = {name.split(" ")[0] for name in sizes}
    assert set(BOOK_CHAPTERS_WITH_EXPLORER) <= chapters, f"explorers found only in {chapters}"
    too_big = {name: size for name, size in sizes.items() if size >= SIZE_LIMIT}
    assert not too_big, f"explorers of {SIZE_LIMIT:,} bytes or more: {too_big}"


def test_the_largest_weight_allowed_is_embedded_exactly():
    weights = torch.tensor([[1e12, 0.0], [0.25, 0.75]], dtype=torch.float64)
    embedded = payload(explore(weights, labels(2)))["weights"]
    assert embedded == [10**15, 0, 250, 750]
    assert max(embedded) < 2**53  # exact as a JavaScript number


def test_surrogate_checks_accept_valid_astral_text():
    emoji = "\U0001f600"  # one code point, two UTF-16 units in the page
    data = payload(explore(torch.ones(2, 2), [emoji, "\u2028"], title=emoji))
    assert data["queryTokens"] == [emoji, "\u2028"] and data["title"] == emoji


def test_sparse_tensors_are_read_and_unreadable_ones_named():
    dense = softmax_weights(6, 6)
    assert explore(dense.to_sparse(), TOKENS).html == explore(dense, TOKENS).html
    with pytest.raises(ValueError, match="weights: .* got Tensor \\(a tensor on the meta device"):
        explore(torch.ones(6, 6, device="meta"), TOKENS)
    with pytest.raises(
        ValueError, match="weights: expected a tensor or array of shape .* got list"
    ):
        explore([[0.5, 0.5], [1.0]], labels(2))
    with pytest.raises(
        ValueError, match="weights: expected weights of at most 1e\\+12 .* got 1.0000001e\\+12"
    ):
        explore(torch.full((2, 2), 1.0000001e12, dtype=torch.float64), labels(2))


def test_chapter_19_explorer_shows_each_methods_mask_offline():
    # the masks explorer: one "head" per method, 1 = read, every row reading its own key
    saved = explorer_outputs(ROOT / "book" / "19_sparse_attention.ipynb")
    masks = [html for html in saved if "keys read, T = 16" in html]
    assert len(masks) == 1, f"expected one masks explorer in chapter 19, found {len(masks)}"
    assert "http" not in masks[0] and "<script src" not in masks[0]  # inline, offline
    match = re.search(r'class="attnx-data">(.*?)</script>', masks[0], flags=re.S)
    data = json.loads(match.group(1))
    assert data["headLabels"][0].startswith("MoBA") and data["headLabels"][-1] == "dense causal"
    assert any(label.startswith("NSA") for label in data["headLabels"])
    weights = np.array(data["weights"]).reshape(data["heads"], 16, 16)
    assert set(np.unique(weights)) <= {0, 1000}  # 1 = read, in thousandths
    assert (np.triu(weights, 1) == 0).all()  # no method reads a future key
    dense = weights[-1] / 1000
    assert (dense == np.tril(np.ones((16, 16)))).all()
