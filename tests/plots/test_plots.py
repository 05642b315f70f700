"""hf_contrast.plots writes valid PNG files (no display) and rejects bad input."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path

import pytest
import torch
from _properties import assert_package_error_or_result, bad_names, bad_numbers, near_tensors, wrong_types
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("matplotlib")

import hf_contrast.plots as plots  # noqa: E402
from hf_contrast.plots import (  # noqa: E402
    EVAL_METRICS,
    plot_augmentation_cosine_histogram,
    plot_embedding_projection,
    plot_loss_curves,
    plot_metric_curves,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000  # axes, points and text, not an empty canvas


@pytest.fixture
def clusters() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 3
    z = 4.0 * torch.randn(3, 8, generator=generator)[labels] + torch.randn(60, 8, generator=generator)
    return z, labels


def test_projection_pca_and_tsne(tmp_path: Path, clusters: tuple[torch.Tensor, torch.Tensor]) -> None:
    z, labels = clusters
    out = plot_embedding_projection(z, labels, tmp_path / "sub" / "pca.png")
    assert out == tmp_path / "sub" / "pca.png"
    _assert_png(out)
    _assert_png(plot_embedding_projection(z.numpy(), None, tmp_path / "nolabels.png"))
    pytest.importorskip("sklearn")
    _assert_png(plot_embedding_projection(z, labels, tmp_path / "tsne.png", method="tsne"))


def test_tsne_falls_back_to_pca_without_sklearn(
    tmp_path: Path, clusters: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_sklearn(name: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("sklearn"):
            raise ImportError("no sklearn")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.warns(UserWarning, match="plotting PCA instead of t-SNE"):
        _assert_png(plot_embedding_projection(*clusters, tmp_path / "fallback.png", method="tsne"))


def test_cosine_histogram(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    f = torch.randn(50, 4, generator=generator)
    augmented = [f + 0.3 * torch.randn(50, 4, generator=generator) for _ in range(3)]
    _assert_png(plot_augmentation_cosine_histogram([f] * 3, augmented, tmp_path / "hist.png"))
    _assert_png(plot_augmentation_cosine_histogram(f, augmented[0], tmp_path / "single.png", bins=20))


def test_loss_curves(tmp_path: Path) -> None:
    history = [
        {"loss": 2.0 - 0.1 * i, "loss_invariance": 1.0 - 0.05 * i, "loss_equivariance": 0.5 / (i + 1), "step": 5 * i}
        for i in range(10)
    ]
    history += [{"eval_loss": 1.5, "step": 25}, {"train_runtime": 3.0, "train_loss": 1.2, "step": 45}]
    _assert_png(plot_loss_curves(history, tmp_path / "loss.png"))


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """Capture every figure the plot functions save (they still write the PNG)."""
    saved: list = []
    real_save = plots._save

    def capture(figure, path):  # type: ignore[no-untyped-def]
        saved.append(figure)
        return real_save(figure, path)

    monkeypatch.setattr(plots, "_save", capture)
    return saved


def test_projection_names_classes_by_label(
    tmp_path: Path, clusters: tuple[torch.Tensor, torch.Tensor], figures: list
) -> None:
    z, labels = clusters
    plot_embedding_projection(z, labels, tmp_path / "named.png", class_names=["cat", "dog", "bird"])
    plot_embedding_projection(z, labels, tmp_path / "mapped.png", class_names={0: "a", 1: "b", 2: "c"})
    plot_embedding_projection(z, labels, tmp_path / "ids.png")
    legends = [[t.get_text() for t in fig.axes[0].get_legend().get_texts()] for fig in figures]
    assert legends == [["cat", "dog", "bird"], ["a", "b", "c"], ["0", "1", "2"]]
    with pytest.raises(ValueError, match="`class_names` \\(2 names\\) has no name for the label 2"):
        plot_embedding_projection(z, labels, tmp_path / "x.png", class_names=["cat", "dog"])


def test_loss_curves_one_panel_per_term(tmp_path: Path, figures: list) -> None:
    history = [
        {"loss": 4.0 - 0.01 * i, "loss_invariance": 4.0 - 0.01 * i, "loss_equivariance": 0.01 + 0.001 * i, "step": i}
        for i in range(10)
    ]
    history += [{"eval_loss": 3.9, "eval_loss_invariance": 3.89, "step": 9}, {"learning_rate": 0.1, "step": 9}]
    _assert_png(plot_loss_curves(history, tmp_path / "loss.png"))
    visible = [ax for ax in figures[0].axes if ax.get_visible()]
    panels = {ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in visible}
    assert panels == {
        "loss": ["loss", "eval_loss"],
        "loss_equivariance": ["loss_equivariance"],
        "loss_invariance": ["loss_invariance", "eval_loss_invariance"],
    }
    small = next(ax for ax in visible if ax.get_title() == "loss_equivariance")
    low, high = small.get_ylim()
    assert high - low < 0.05  # the 0.01 term has its own scale, not the 4.0 term's


def test_metric_curves_read_the_evaluation_names(tmp_path: Path, figures: list) -> None:
    history = [
        {
            "eval_alignment": 1.0 - 0.1 * i,
            "eval_uniformity": -1.0 - 0.2 * i,
            "eval_knn_loo_accuracy": 0.2 + 0.1 * i,
            "eval_equivariance_wahba_error": 0.5 / (i + 1),
            "eval_equivariance_gamma_f": 0.1 * i,
            "eval_loss": 2.0,
            "step": 10 * i,
        }
        for i in range(4)
    ]
    _assert_png(plot_metric_curves(history, tmp_path / "metrics.png"))
    titles = [ax.get_title() for ax in figures[0].axes if ax.get_visible()]
    assert titles == list(EVAL_METRICS)
    plot_metric_curves(history, tmp_path / "two.png", metrics=["eval_knn_loo_accuracy", "eval_missing"])
    assert [ax.get_title() for ax in figures[1].axes if ax.get_visible()] == ["eval_knn_loo_accuracy"]
    with pytest.raises(ValueError, match="no finite value for any of"):
        plot_metric_curves([{"eval_loss": 1.0, "step": 1}], tmp_path / "x.png")


def test_an_evaluation_after_training_is_not_drawn_again_at_the_last_step(tmp_path: Path, figures: list) -> None:
    """After ``load_best_model_at_end`` (best: step 10), ``trainer.evaluate()`` logs the best weights' numbers at the
    last step (20) again: the curve dropped vertically there. One point per step, the one logged in training."""
    history = [
        {"eval_knn_loo_accuracy": 0.9, "eval_uniformity": -2.0, "step": 10},
        {"eval_knn_loo_accuracy": 0.8, "eval_uniformity": -3.0, "step": 20},
        {"train_runtime": 5.0, "train_loss": 1.0, "step": 20},
        {"eval_knn_loo_accuracy": 0.9, "eval_uniformity": -2.0, "step": 20},  # the reloaded step-10 weights
    ]
    plot_metric_curves(history, tmp_path / "metrics.png")
    for ax in (ax for ax in figures[0].axes if ax.get_visible()):
        (line,) = ax.get_lines()
        assert list(line.get_xdata()) == [10.0, 20.0], ax.get_title()
    points = {ax.get_title(): list(ax.get_lines()[0].get_ydata()) for ax in figures[0].axes if ax.get_visible()}
    assert points == {"eval_knn_loo_accuracy": [0.9, 0.8], "eval_uniformity": [-2.0, -3.0]}


def test_plot_errors(tmp_path: Path, clusters: tuple[torch.Tensor, torch.Tensor]) -> None:
    z, labels = clusters
    with pytest.raises(ValueError, match="`method` must be 'pca' or 'tsne'"):
        plot_embedding_projection(z, labels, tmp_path / "x.png", method="umap")
    with pytest.raises(ValueError, match="`z` needs at least 2 features"):
        plot_embedding_projection(z[:, :1], labels, tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"`labels` must have shape \(60,\)"):
        plot_embedding_projection(z, labels[:5], tmp_path / "x.png")
    with pytest.raises(ValueError, match="must hold the same number of augmentations"):
        plot_augmentation_cosine_histogram([z, z], [z], tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"`f` and `f_a` \(augmentation 0\) must have the same shape"):
        plot_augmentation_cosine_histogram(z, z[:, :3], tmp_path / "x.png")
    # a run shorter than its logging_steps (run_simo.py --max_steps 7 logs every 10): the advice names the flag
    said = r"no finite value .*\(2 entries, up to step 7\): a run shorter than its `logging_steps` logs no loss"
    with pytest.raises(ValueError, match=said + r" .*`--logging_steps 1`"):
        plot_loss_curves([{"learning_rate": 0.1, "step": 1}, {"train_runtime": 3.9, "step": 7}], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_missing_matplotlib_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    # a hint that works from a checkout (no `hf-contrast[plots]`: the package is not on PyPI)
    with pytest.raises(
        ImportError, match=r"`pip install matplotlib` \(or, from a checkout, `pip install -e \.` again\)"
    ):
        plot_loss_curves([{"loss": 1.0, "step": 1}], tmp_path / "x.png")


# ---- the doors under generated arguments (tests/_properties.py) ------------------------------------------------

_VALUES = st.one_of(wrong_types, bad_numbers, bad_names, near_tensors(()), near_tensors((0,)))
_LOGS = st.lists(
    st.dictionaries(
        st.sampled_from(["loss", "eval_loss", "step", "epoch", "eval_alignment", "x"]),
        st.one_of(st.floats(allow_nan=True), st.integers(-2, 5), st.none(), st.text(max_size=2)),
        max_size=4,
    ),
    max_size=5,
)
_FEW = settings(max_examples=max(1, settings().max_examples // 4))  # each example draws a figure


def _png_written(path: Path) -> None:
    assert isinstance(path, Path) and path.read_bytes()[:8] == PNG_MAGIC


@_FEW
@given(
    argument=st.sampled_from(["method", "title", "seed", "class_names"]),
    value=st.one_of(_VALUES, st.lists(st.text(max_size=3), max_size=4), st.sampled_from(["pca", "tsne", 2**32])),
)
def test_projection_draws_or_names_the_argument(tmp_path_factory, argument, value) -> None:
    """A title that is a tensor raised "Boolean value of Tensor with no values is ambiguous"."""
    options = {"labels": torch.tensor([0, 1, 0, 1, 2, 2]), argument: value}
    path = tmp_path_factory.mktemp("plot") / "p.png"
    assert_package_error_or_result(
        lambda: plot_embedding_projection(torch.randn(6, 3), path=path, **options), (argument, "labels"), _png_written
    )


@_FEW
@given(argument=st.sampled_from(["bins", "title"]), value=st.one_of(_VALUES, st.just(10**18)))
def test_histogram_draws_or_names_the_argument(tmp_path_factory, argument, value) -> None:
    """`bins=10**18` raised numpy's "Maximum allowed size exceeded"; a tensor title, as above."""
    path = tmp_path_factory.mktemp("plot") / "h.png"
    assert_package_error_or_result(
        lambda: plot_augmentation_cosine_histogram(torch.randn(6, 3), torch.randn(6, 3), path, **{argument: value}),
        (argument,),
        _png_written,
    )


@_FEW
@given(
    log_history=st.one_of(_LOGS, _VALUES, st.just({"loss": 1.0, "step": 1})),
    argument=st.sampled_from(["prefixes", "metrics", "title"]),
    value=st.one_of(_VALUES, st.lists(st.text(max_size=4), max_size=3), st.just(("loss",))),
)
def test_curves_draw_or_name_the_argument(tmp_path_factory, log_history, argument, value) -> None:
    """A `log_history` that is None, a string or one dict raised TypeError / AttributeError."""
    path = tmp_path_factory.mktemp("plot") / "c.png"
    draw = plot_metric_curves if argument == "metrics" else plot_loss_curves
    assert_package_error_or_result(
        lambda: draw(log_history, path, **{argument: value}), ("log_history", argument), _png_written
    )
