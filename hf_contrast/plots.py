"""Pictures of a trained embedding space, written as PNG files (matplotlib, part of the base install).

Figures are drawn on a ``matplotlib.figure.Figure`` with the Agg canvas: no display, no pyplot
global state, no backend switch in the caller's process.

- :func:`plot_embedding_projection`: 2-D PCA / t-SNE of embeddings coloured by class.
- :func:`plot_augmentation_cosine_histogram`: histogram of ``cos(f(x), f(a(x)))`` for sampled
  augmentations (CARE, https://arxiv.org/abs/2306.13924, Figure 6).
- :func:`plot_loss_curves`: every logged loss term against the step, from
  ``trainer.state.log_history``, one panel per term (CARE's ~0.01 equivariance term stays
  readable next to its ~4 invariance term).
- :func:`plot_metric_curves`: evaluation metrics against the step, one panel per metric
  (:data:`EVAL_METRICS` by default).
- :func:`save_training_plots`: the pictures of a finished run that can be drawn from what is given
  (what the ``examples/`` scripts write).

Classes are named by their labels when ``class_names`` is given (e.g.
``dataset.features["label"].names`` of a ``ClassLabel``: folder names of an image folder).
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from .metrics.inputs import as_embeddings, as_labels
from .tensor_checks import MAX_SKLEARN_SEED, check_int

#: The most bins a histogram takes (numpy refuses ~1e18 as "Maximum allowed size exceeded"; the plot of a few
#: thousand cosines needs 50).
MAX_BINS = 100_000

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "EVAL_METRICS",
    "plot_augmentation_cosine_histogram",
    "plot_embedding_projection",
    "plot_loss_curves",
    "plot_metric_curves",
    "save_training_plots",
]

logger = logging.getLogger(__name__)

EVAL_METRICS = (
    "eval_alignment",
    "eval_uniformity",
    "eval_knn_loo_accuracy",
    "eval_equivariance_wahba_error",
    "eval_equivariance_gamma_f",
)
"""The evaluation metrics :func:`plot_metric_curves` draws by default (names in ``log_history``)."""


def _new_figure(width: float = 6.0, height: float = 4.5) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "hf_contrast.plots needs matplotlib, which the package's install brings: `pip install matplotlib` (or, "
            "from a checkout, `pip install -e .` again)."
        ) from error
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _save(figure: Figure, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def _pca_2d(z: Tensor) -> Tensor:
    centred = z - z.mean(dim=0)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    return centred @ vh[:2].T


def _tsne_2d(z: Tensor, seed: int) -> Tensor | None:
    try:
        from sklearn.manifold import TSNE
    except ImportError:
        return None
    perplexity = min(30.0, (z.shape[0] - 1) / 3.0)
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed)
    return torch.from_numpy(tsne.fit_transform(z.cpu().numpy()))


def plot_embedding_projection(
    z: object,
    labels: object | None,
    path: str | os.PathLike[str],
    method: str = "pca",
    title: str | None = None,
    seed: int = 0,
    class_names: Sequence[str] | Mapping[int, str] | None = None,
) -> Path:
    """Scatter a 2-D projection of embeddings, one colour per class.

    PCA is computed in torch (centred SVD, top two components). ``method="tsne"`` uses
    scikit-learn's ``TSNE`` (PCA init, perplexity ``min(30, (n − 1)/3)``, ``random_state=seed``);
    without scikit-learn it warns and falls back to PCA.

    Args:
        z: Embeddings. Shape: ``(n, D)`` with ``n >= 4`` and ``D >= 2``.
        labels: Integer class of each row, or ``None`` for one colour. Shape: ``(n,)``.
        path: PNG file to write (parent folders are created).
        method: ``"pca"`` or ``"tsne"``.
        title: Figure title (default: the method name).
        seed: t-SNE random state, an integer in ``[0, 2**32 - 1]``.
        class_names: Name of each class id (a sequence indexed by id, e.g. a ``ClassLabel``'s
            ``names``, or a mapping id → name), shown in the legend instead of the ids.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: on bad shapes, an unknown ``method``, too few samples, a label without a
            name in ``class_names``, a ``title`` that is no string or a ``seed`` out of range.
        ImportError: if matplotlib is not installed.
    """
    if method not in ("pca", "tsne"):
        raise InputError(f"`method` must be 'pca' or 'tsne', got {method!r}.")
    _check_title(title)
    check_int("seed", seed, 0, MAX_SKLEARN_SEED, fix="scikit-learn's t-SNE takes a 32-bit `random_state`.")
    x = as_embeddings("z", z, min_rows=4).cpu()
    if x.shape[1] < 2:
        raise InputError(f"`z` needs at least 2 features to project to 2-D, got shape {tuple(x.shape)}.")
    y = None if labels is None else as_labels("labels", labels, x.shape[0], x.device)
    names = None if y is None else _class_names(class_names, torch.unique(y).tolist())
    figure = _new_figure()
    points = None
    if method == "tsne":
        points = _tsne_2d(x, seed)
        if points is None:
            warnings.warn("scikit-learn is not installed: plotting PCA instead of t-SNE.", stacklevel=2)
            method = "pca"
    if points is None:
        points = _pca_2d(x)
    ax = figure.subplots()
    if y is None:
        ax.scatter(points[:, 0], points[:, 1], s=8, alpha=0.8)
    else:
        classes = torch.unique(y).tolist()
        cmap = _class_colormap(len(classes))
        for index, cls in enumerate(classes):
            mask = y == cls
            ax.scatter(points[mask, 0], points[mask, 1], s=8, alpha=0.8, color=cmap(index), label=names[cls])
        if len(classes) <= 20:
            # outside the axes, so the legend never hides points
            ax.legend(title="class", fontsize="small", markerscale=2, loc="center left", bbox_to_anchor=(1.0, 0.5),
                      ncols=2 if len(classes) > 10 else 1)  # fmt: skip
    axes = {"pca": ("PC 1", "PC 2"), "tsne": ("t-SNE 1", "t-SNE 2")}[method]
    ax.set_xlabel(axes[0])
    ax.set_ylabel(axes[1])
    ax.set_title(title or f"{method.upper() if method == 'pca' else 't-SNE'} of {x.shape[0]} embeddings")
    return _save(figure, path)


def _class_names(class_names: Sequence[str] | Mapping[int, str] | None, classes: list[int]) -> dict[int, str]:
    if class_names is None:
        return {c: str(c) for c in classes}
    if isinstance(class_names, (str, bytes)) or not isinstance(class_names, (Sequence, Mapping)):
        raise InputError(f"`class_names` must be a sequence or a mapping of class names, got {class_names!r}.")
    names: dict[int, str] = {}
    for c in classes:
        known = c in class_names if isinstance(class_names, Mapping) else 0 <= c < len(class_names)
        if not known:
            size = f"{len(class_names)} names"
            raise InputError(f"`class_names` ({size}) has no name for the label {c}; pass one name per class id.")
        names[c] = str(class_names[c])
    return names


def _class_colormap(count: int) -> Any:
    from matplotlib import colormaps

    return colormaps["tab10" if count <= 10 else "tab20" if count <= 20 else "turbo"].resampled(max(count, 1))


def _as_views(name: str, views: object) -> list[Tensor]:
    if isinstance(views, Sequence) and not isinstance(views, (str, bytes)):
        if len(views) == 0:
            raise InputError(f"`{name}` must not be an empty sequence.")
        return [as_embeddings(f"{name}[{i}]", v) for i, v in enumerate(views)]
    return [as_embeddings(name, views)]


def plot_augmentation_cosine_histogram(
    f: object,
    f_a: object,
    path: str | os.PathLike[str],
    bins: int = 50,
    title: str | None = None,
) -> Path:
    """Histogram of ``cos(f(x_i), f(a(x_i)))`` over samples and sampled augmentations.

    CARE (https://arxiv.org/abs/2306.13924), Figure 6: mass near 1 means approximate invariance;
    a small spread *within* one augmentation means every embedding is moved the same way (an
    orthogonal action). The legend reports the mean cosine and the mean over augmentations of the
    within-augmentation variance ``σ²``.

    Args:
        f: Embeddings of the originals, or a sequence of them (one per augmentation).
            Shape: ``(n, D)`` each.
        f_a: Embeddings under one augmentation, or a sequence aligned with ``f``.
            Shape: ``(n, D)`` each, equal to the matching ``f``.
        path: PNG file to write.
        bins: Number of bins on ``[-1, 1]``, at most :data:`MAX_BINS` (100,000).
        title: Figure title.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: on shape mismatches, sequences of different lengths or a ``title`` that is no string.
        ImportError: if matplotlib is not installed.
    """
    originals, augmented = _as_views("f", f), _as_views("f_a", f_a)
    if len(originals) != len(augmented):
        raise InputError(
            f"`f` and `f_a` must hold the same number of augmentations, got {len(originals)} and {len(augmented)}."
        )
    check_int("bins", bins, 1, MAX_BINS)
    _check_title(title)
    cosines = []
    for i, (a, b) in enumerate(zip(originals, augmented)):
        if a.shape != b.shape:
            raise InputError(
                f"`f` and `f_a` (augmentation {i}) must have the same shape, "
                f"got {tuple(a.shape)} and {tuple(b.shape)}."
            )
        cosines.append(torch.nn.functional.cosine_similarity(a, b.to(a.device), dim=1, eps=1e-12).cpu())
    values = torch.cat(cosines)
    variance = sum(float(c.var(correction=0)) for c in cosines) / len(cosines)
    figure = _new_figure()
    ax = figure.subplots()
    ax.hist(
        values.numpy(),
        bins=bins,
        range=(-1.0, 1.0),
        density=True,
        alpha=0.8,
        label=f"mean cos {float(values.mean()):.3f}, within-augmentation σ² {variance:.2e}",
    )
    ax.set_xlim(-1.0, 1.0)
    ax.set_xlabel("cos(f(x), f(a(x)))")
    ax.set_ylabel("density")
    ax.legend(loc="upper left")
    ax.set_title(title or f"{len(cosines)} sampled augmentation(s) × {originals[0].shape[0]} samples")
    return _save(figure, path)


def _check_title(title: object) -> None:
    if title is not None and not isinstance(title, str):
        raise InputError(f"`title` must be a string or None, got {title!r} of type {type(title).__name__}.")


def _check_log_history(log_history: object) -> None:
    """A sequence of mappings (``trainer.state.log_history``); a string or a lone mapping is none."""
    if (
        isinstance(log_history, (str, bytes, Mapping))
        or not isinstance(log_history, Sequence)
        or not all(isinstance(entry, Mapping) for entry in log_history)
    ):
        shown = type(log_history).__name__
        if isinstance(log_history, Sequence) and not isinstance(log_history, (str, bytes)):
            shown += " holding " + ", ".join(sorted({type(entry).__name__ for entry in log_history}))
        raise InputError(f"`log_history` must be a list of logged dicts (`trainer.state.log_history`), got a {shown}.")


def _check_names(name: str, value: object) -> tuple[str, ...]:
    """A string or a sequence of strings, as a tuple."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (Sequence, set, frozenset)) or not all(isinstance(v, str) for v in names):
        raise InputError(f"`{name}` must be a string or a sequence of strings, got {value!r}.")
    return tuple(names)


def _curves(log_history: Sequence[Mapping[str, Any]], wanted: Any) -> dict[str, tuple[list[float], list[float]]]:
    """``{key: (steps, values)}``, one value per key and step: the first logged. A ``trainer.evaluate()`` after
    training is logged at the last step again; after ``load_best_model_at_end`` it scores the best step's weights,
    and drawing it too made every curve drop vertically at the last step."""
    curves: dict[str, tuple[list[float], list[float]]] = {}
    drawn: set[tuple[str, float]] = set()
    for entry in log_history:
        step = entry.get("step")
        if not isinstance(step, (int, float)):
            continue
        for key, value in entry.items():
            if wanted(key) and _is_number(value) and (key, float(step)) not in drawn:
                drawn.add((key, float(step)))
                xs, ys = curves.setdefault(key, ([], []))
                xs.append(float(step))
                ys.append(float(value))
    return curves


def _panels(
    panels: dict[str, list[str]], curves: Mapping[str, tuple[list[float], list[float]]], ylabel: Any
) -> Figure:
    """One subplot per panel (its own y scale), each drawing its keys' curves against the step."""
    count = len(panels)
    ncols = min(3, count)
    nrows = math.ceil(count / ncols)
    figure = _new_figure(width=4.2 * ncols, height=3.2 * nrows)
    grid = figure.subplots(nrows, ncols, sharex=True, squeeze=False)
    for ax, (panel, keys) in zip(grid.flat, panels.items()):
        for key in keys:
            xs, ys = curves[key]
            style = "--" if key.startswith("eval") else "-"
            ax.plot(xs, ys, style, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
        ax.set_title(panel, fontsize="medium")
        ax.set_ylabel(ylabel(panel))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(grid.flat)[count:]:
        ax.set_visible(False)
    for ax in grid[-1]:
        ax.set_xlabel("step")
    return figure


def plot_loss_curves(
    log_history: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    prefixes: tuple[str, ...] = ("loss", "eval_loss"),
    title: str | None = None,
) -> Path:
    """Plot each logged loss term against the step (``trainer.state.log_history``), one panel per term.

    Every numeric key starting with one of ``prefixes`` becomes a curve (``loss``,
    ``loss_invariance``, ``loss_equivariance``, ``eval_loss``, …); entries without ``step`` are
    ignored (the Trainer always writes it). Each term gets its own subplot and y scale, with its
    evaluation curve (``eval_`` + the key, dashed) in the same subplot, so a small term (CARE's
    ~0.01 equivariance loss) is not flattened under a large one.

    Args:
        log_history: The list of logged dicts, e.g. ``trainer.state.log_history``.
        path: PNG file to write.
        prefixes: Key prefixes selecting the curves.
        title: Figure title.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: if ``log_history`` is not a list of dicts, ``prefixes`` not strings, or no entry has a finite
            numeric value under a matching key.
        ImportError: if matplotlib is not installed.
    """
    _check_log_history(log_history)
    prefixes = _check_names("prefixes", prefixes)
    _check_title(title)
    curves = _curves(log_history, lambda key: key.startswith(prefixes))
    if not curves:
        steps = [e["step"] for e in log_history if isinstance(e.get("step"), int)]
        until = f", up to step {max(steps)}" if steps else ""
        raise InputError(
            f"`log_history` has no finite value under a key starting with {prefixes} ({len(log_history)} "
            f"entries{until}): a run shorter than its `logging_steps` logs no loss (log more often, e.g. "
            "`--logging_steps 1`), and `eval_loss` needs evaluations; pass `trainer.state.log_history` after training."
        )
    panels: dict[str, list[str]] = {}
    for key in sorted(curves, key=lambda k: (k.removeprefix("eval_"), k.startswith("eval_"))):
        panels.setdefault(key.removeprefix("eval_"), []).append(key)
    figure = _panels(panels, curves, lambda panel: "loss")
    figure.suptitle(title or "training loss terms")
    return _save(figure, path)


def plot_metric_curves(
    log_history: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    metrics: Sequence[str] = EVAL_METRICS,
    title: str | None = None,
) -> Path:
    """Plot evaluation metrics against the step, one panel per metric found in ``log_history``.

    The defaults (:data:`EVAL_METRICS`) are the names the evaluation logs: alignment and
    uniformity (Wang & Isola 2020), kNN accuracy, and CARE's equivariance Wahba error and
    ``γ_f`` (docs/methods.md). Metrics absent from ``log_history`` are left out.

    Args:
        log_history: The list of logged dicts, e.g. ``trainer.state.log_history``.
        path: PNG file to write.
        metrics: Keys to plot.
        title: Figure title.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: if ``log_history`` is not a list of dicts, ``metrics`` not strings, or none of ``metrics`` has a
            finite value in ``log_history``.
        ImportError: if matplotlib is not installed.
    """
    _check_log_history(log_history)
    wanted = list(_check_names("metrics", metrics))
    _check_title(title)
    curves = _curves(log_history, lambda key: key in wanted)
    if not curves:
        raise InputError(
            f"`log_history` has no finite value for any of {wanted} ({len(log_history)} entries); evaluate during "
            "training (`eval_strategy`) or pass `metrics=` with the logged names."
        )
    panels = {key: [key] for key in wanted if key in curves}
    figure = _panels(panels, curves, lambda panel: panel.removeprefix("eval_"))
    figure.suptitle(title or "evaluation metrics")
    return _save(figure, path)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def save_training_plots(
    output_dir: str | os.PathLike[str],
    title: str,
    *,
    log_history: Sequence[Mapping[str, Any]] | None = None,
    z: Tensor | None = None,
    labels: Tensor | None = None,
    class_names: Sequence[str] | Mapping[int, str] | None = None,
    f: Tensor | None = None,
    f_a: Sequence[Tensor] | None = None,
    projection: str = "pca",
    seed: int = 0,
) -> list[Path]:
    """Draw the pictures of a run into ``output_dir``, each from what is given.

    - ``embeddings.png`` from ``z`` ``(n, D)`` (and ``labels`` ``(n,)``, ``class_names``):
      :func:`plot_embedding_projection` with ``projection`` (``"pca"`` or ``"tsne"``);
    - ``augmentation_cosines.png`` from ``f`` ``(n, D)`` and ``f_a`` (a list of ``(n, D)``):
      :func:`plot_augmentation_cosine_histogram` of ``cos(f, f_a[k])``;
    - ``loss_curves.png`` and ``eval_curves.png`` (every logged ``eval_*`` metric but ``eval_loss`` and
      timings) from ``log_history`` (``trainer.state.log_history``).

    A picture that cannot be drawn (matplotlib missing, too few points) is skipped with a warning; the
    others are still written. Each picture is announced on this module's logger (INFO).

    Returns:
        The paths written.
    """
    if not isinstance(title, str):
        raise InputError(f"`title` must be a string, got {title!r} of type {type(title).__name__}.")
    if log_history is not None:
        _check_log_history(log_history)
    out = Path(output_dir)
    jobs: list[tuple[str, Any]] = []
    if z is not None:
        jobs.append(("embeddings.png", lambda p: plot_embedding_projection(
            z, labels, p, method=projection, seed=seed, class_names=class_names,
            title=f"{title}: {len(z)} test embeddings ({projection})")))  # fmt: skip
    if f is not None and f_a:
        jobs.append(
            ("augmentation_cosines.png", lambda p: plot_augmentation_cosine_histogram([f] * len(f_a), list(f_a), p))
        )
    if log_history:
        jobs.append(("loss_curves.png", lambda p: plot_loss_curves(log_history, p, title=f"{title}: loss terms")))
        timings = ("_runtime", "_per_second", "eval_loss")
        metrics = sorted({k for e in log_history for k in e if k.startswith("eval_") and not k.endswith(timings)})
        if metrics:
            jobs.append(
                (
                    "eval_curves.png",
                    lambda p: plot_metric_curves(log_history, p, metrics, title=f"{title}: evaluation"),
                )
            )
    written = []
    for index, (name, draw) in enumerate(jobs, 1):
        slow = (
            " (t-SNE: a minute or two for a few thousand points)"
            if name == "embeddings.png" and projection == "tsne"
            else ""
        )
        logger.info("[%d/%d] drawing %s%s", index, len(jobs), out / name, slow)
        try:
            written.append(draw(out / name))
        except (ValueError, ImportError) as error:
            warnings.warn(f"{name} not drawn: {error}", RuntimeWarning, stacklevel=2)
    return written
