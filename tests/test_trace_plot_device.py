"""Shape traces, heatmaps and device selection."""

import subprocess
import sys

import matplotlib
import pytest
import torch

from attnbook import (
    MultiHeadAttention,
    get_device,
    plot_attention,
    plot_heads,
    plot_mask,
    plot_scores,
    record,
    scaled_dot_product_attention,
    set_seed,
    trace_shapes,
)

matplotlib.use("Agg")


def test_trace_records_module_steps_with_shapes():
    module = MultiHeadAttention(16, 4)
    with trace_shapes() as trace:
        module(torch.randn(2, 5, 16), need_weights=True)
    assert trace["q"] == (2, 4, 5, 4)
    assert trace["weights"] == (2, 4, 5, 5)
    assert trace["output"] == (2, 5, 16)
    assert trace.steps[:3] == ["q", "k", "v"]
    assert "(B, H, T, d_head)" in repr(trace) and "<table" in trace._repr_html_()


def test_fused_path_records_no_weights():
    with trace_shapes() as trace:
        MultiHeadAttention(16, 4)(torch.randn(2, 5, 16))
    assert trace.steps == ["q", "k", "v", "attended", "merged", "output"]
    with pytest.raises(KeyError, match="no step 'weights'"):
        trace["weights"]


def test_record_is_a_no_op_outside_a_trace_and_checks_dims_inside():
    record("x", torch.zeros(2, 3), "B")  # nothing active: ignored
    with trace_shapes() as trace, pytest.raises(ValueError, match="dims: 'B' does not fit"):
        record("x", torch.zeros(2, 3), "B")
    assert len(trace) == 0


def test_text_table_lines_up():
    with trace_shapes() as trace:
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2))
    lines = repr(trace).splitlines()
    assert lines[0].split() == ["step", "dims", "shape", "meaning"]
    assert lines[1].split()[:5] == ["scores", "(...,", "T,", "S)", "(3,"]
    assert lines[1].index("(...") == lines[0].index("dims")


def test_plot_attention_follows_the_convention():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = plot_attention(weights, list("abc"), list("wxyz"), title="t")
    image = ax.get_images()[0]
    assert ax.get_ylabel() == "query" and ax.get_xlabel() == "key"
    assert image.origin == "upper" and image.get_array().shape == (3, 4)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert len(ax.figure.axes) == 2  # the heatmap and its colorbar
    matplotlib.pyplot.close(ax.figure)


def test_plot_scores_is_diverging_and_symmetric_about_zero():
    scores = torch.tensor([[-3.0, 1.0, float("-inf")], [0.5, 2.0, -1.0]])
    ax = plot_scores(scores, list("ab"), list("xyz"))
    image = ax.get_images()[0]
    assert image.get_clim() == (-3.0, 3.0)  # the largest finite magnitude, both ways
    assert image.get_array().mask[0, 2]  # -inf drawn as "masked", not clipped
    assert image.get_cmap().name.startswith("RdBu_r")
    assert ax.figure.axes[1].get_ylabel() == "score"
    assert ax.get_ylabel() == "query" and ax.get_xlabel() == "key"
    matplotlib.pyplot.close(ax.figure)


def test_plot_mask_draws_two_colours_and_refuses_non_boolean_masks():
    mask = torch.tensor([[True, False], [True, True]])
    ax = plot_mask(mask, list("ab"), list("xy"))
    colorbar = ax.get_images()[0].colorbar
    assert [t.get_text() for t in colorbar.ax.get_yticklabels()] == ["False", "True"]
    assert colorbar.ax.get_ylabel() == "may attend"
    assert ax.get_images()[0].get_array().tolist() == [[1, 0], [1, 1]]
    matplotlib.pyplot.close(ax.figure)
    with pytest.raises(ValueError, match="mask: expected a boolean mask"):
        plot_mask(mask.float())


def test_plot_heads_shares_one_colour_scale():
    weights = torch.softmax(torch.randn(5, 3, 4), dim=-1)
    fig = plot_heads(weights, ncols=3)
    heatmaps = [ax for ax in fig.axes if ax.get_images() and ax.get_visible()]
    assert len(heatmaps) == 5
    assert {ax.get_images()[0].get_clim() for ax in heatmaps} == {(0.0, float(weights.max()))}
    matplotlib.pyplot.close(fig)


def test_get_device_honours_environment(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv("ATTNBOOK_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="ATTNBOOK_DEVICE: expected a torch device"):
        get_device()
    monkeypatch.delenv("ATTNBOOK_DEVICE")
    assert get_device().type in {"cpu", "cuda", "mps"}


def test_asking_for_cuda_with_a_cpu_only_torch_says_which_build_to_install(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cuda")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ValueError, match="has no CUDA support") as error:
        get_device()
    assert "torch.version.cuda is None" in str(error.value)
    assert "TORCH_BUILD=default" in str(error.value)


def test_asking_for_cuda_on_a_machine_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cuda:1")
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # a CUDA build...
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # ...and no GPU
    with pytest.raises(ValueError, match="asks for 'cuda:1', but this machine has no such device"):
        get_device()


def test_set_seed_repeats_runs():
    set_seed(3)
    first = torch.randn(4)
    set_seed(3)
    assert torch.equal(torch.randn(4), first)


def test_importing_attnbook_leaves_matplotlib_style_alone_until_asked():
    script = (
        "import matplotlib; before = dict(matplotlib.rcParams); import attnbook; "
        "assert dict(matplotlib.rcParams) == before, 'import changed rcParams'; "
        "attnbook.use_book_style(); "
        "assert matplotlib.rcParams['font.size'] == 11, matplotlib.rcParams['font.size']"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=60)
