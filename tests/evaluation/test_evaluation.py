"""Tests of hf_contrast.evaluation: EmbeddingMetrics, the evaluators, encode_dataset and balanced sampling."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import torch
from _tiny import tiny_text_encoder
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from transformers import EvalPrediction

from hf_contrast.data.sampling import sample_rows
from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.evaluation import (
    EmbeddingEvaluator,
    EmbeddingMetrics,
    EquivarianceEvaluator,
    Evaluator,
    ProbeEvaluator,
    RepresentationCollapseWarning,
    SequentialEvaluator,
    STSEvaluator,
    balanced_split,
    balanced_subset,
    encode_dataset,
)
from hf_contrast.metrics import class_orthogonality, effective_rank, knn_accuracy


def _clusters(n_per_class: int, classes: int = 3, dim: int = 6, noise: float = 0.3, seed: int = 0):
    """Class-sorted embeddings: ``n_per_class`` rows of class 0, then class 1, …"""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(classes).repeat_interleave(n_per_class)
    centres = 3.0 * torch.randn(classes, dim, generator=g, dtype=torch.float64)
    return centres[labels] + noise * torch.randn(labels.numel(), dim, generator=g, dtype=torch.float64), labels


# ----------------------------------------------------------------------------- sampling
def test_balanced_subset_takes_every_class_of_a_sorted_split() -> None:
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 3)
    rows = balanced_subset(labels, 20, seed=0)
    assert rows.tolist() == sorted(set(rows.tolist())) and len(rows) == 20
    assert sorted(torch.bincount(labels[rows]).tolist()) == [3, 8, 9]  # class 2 gives all 3, the rest share 17
    assert torch.equal(rows, balanced_subset(labels.numpy(), 20, seed=0))  # seeded, numpy accepted
    assert not torch.equal(rows, balanced_subset(labels, 20, seed=1))
    assert torch.bincount(labels[balanced_subset(labels, 9, seed=3)]).tolist() == [3, 3, 3]
    with pytest.raises(ValueError, match=r"`n` must be an integer in \[1, 83\]"):
        balanced_subset(labels, 84)
    with pytest.raises(ValueError, match="`labels` must be a 1-D integer"):
        balanced_subset(torch.rand(5), 2)


def test_sample_rows_is_balanced_with_labels_and_a_seeded_uniform_draw_without() -> None:
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 3)
    assert torch.equal(sample_rows(83, 20, seed=0, labels=labels), balanced_subset(labels, 20, seed=0))
    rows = sample_rows(83, 20, seed=0)
    assert rows.tolist() == sorted(set(rows.tolist())) and len(rows) == 20 and 0 <= rows.min() and rows.max() < 83
    assert torch.equal(rows, sample_rows(83, 20, seed=0)) and not torch.equal(rows, sample_rows(83, 20, seed=1))
    assert torch.bincount(labels[rows], minlength=3)[0] > 9  # uniform, not balanced (at most 9): class 0 holds 60 %


def test_balanced_split_is_stratified_disjoint_and_complete() -> None:
    labels = torch.tensor([0] * 40 + [1] * 20 + [2] * 2 + [3])
    train, test = balanced_split(labels, 0.25, seed=0)
    assert sorted(train.tolist() + test.tolist()) == list(range(len(labels)))
    assert torch.bincount(labels[test], minlength=4).tolist() == [10, 5, 1, 0]  # a single-row class trains only
    with pytest.raises(ValueError, match="`test_fraction` must be a number in"):
        balanced_split(labels, 1.0)


# ----------------------------------------------------------------------- EmbeddingMetrics
def test_embedding_metrics_match_independent_references() -> None:
    z, y = _clusters(20, noise=1.5)
    g = torch.Generator().manual_seed(5)
    v1, v2 = (
        z + 0.5 * torch.randn(z.shape, generator=g, dtype=torch.float64),
        z + 0.5 * torch.randn(z.shape, generator=g, dtype=torch.float64),
    )
    metrics = EmbeddingMetrics(knn_k=5, knn_temperature=0.1, max_samples=None, progress=False)
    out = metrics(EvalPrediction(predictions=(z.numpy(), v1.numpy(), v2.numpy()), label_ids=y.numpy()))
    assert set(out) == {
        "alignment",
        "uniformity",
        "mean_cosine",
        "effective_rank",
        "knn_loo_accuracy",
        "linear_probe_holdout_accuracy",
        "class_orthogonality",
    }
    u, a, b = (x.numpy() / np.linalg.norm(x.numpy(), axis=1, keepdims=True) for x in (z, v1, v2))
    n = len(u)
    assert out["alignment"] == pytest.approx(np.mean(np.sum((a - b) ** 2, axis=1)), rel=1e-10)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    assert out["uniformity"] == pytest.approx(
        np.log(np.mean([np.exp(-2 * np.sum((u[i] - u[j]) ** 2)) for i, j in pairs])), rel=1e-10
    )
    assert out["mean_cosine"] == pytest.approx(np.mean([u[i] @ u[j] for i, j in pairs]), rel=1e-10)
    assert out["effective_rank"] == pytest.approx(effective_rank(z))
    assert out["knn_loo_accuracy"] == pytest.approx(knn_accuracy(z, y, k=5, temperature=0.1))
    assert out["class_orthogonality"] == pytest.approx(class_orthogonality(z, y))
    # the probe: scikit-learn on the seeded stratified split, fitted independently here
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    train, test = balanced_split(y, 0.25, seed=0)
    scaler = StandardScaler().fit(z[train].numpy())
    clf = LogisticRegression(max_iter=1000, random_state=0).fit(scaler.transform(z[train].numpy()), y[train].numpy())
    assert out["linear_probe_holdout_accuracy"] == pytest.approx(
        np.mean(clf.predict(scaler.transform(z[test].numpy())) == y[test].numpy())
    )
    unlabelled = metrics(EvalPrediction(predictions=z, label_ids=None))  # tensors, no labels, no views
    assert set(unlabelled) == {"uniformity", "mean_cosine", "effective_rank"}
    placeholder = metrics(EvalPrediction(predictions=(z,), label_ids=np.full(len(z), -1)))  # the trainer's "no labels"
    assert placeholder == unlabelled
    with pytest.raises(ValueError, match="mixes negative"):
        metrics((z, torch.where(y == 0, -1, y)))


def test_embedding_metrics_subsample_a_class_sorted_split_class_balanced() -> None:
    z, y = _clusters(200)  # 600 rows sorted by class: the first 90 rows are all class 0
    out = EmbeddingMetrics(knn_k=10, max_samples=90, seed=3, progress=False)((z, y))
    rows = balanced_subset(y, 90, seed=3)
    assert torch.bincount(y[rows]).tolist() == [30, 30, 30]
    assert (
        out["knn_loo_accuracy"] == pytest.approx(knn_accuracy(z[rows], y[rows], k=10))
        and out["knn_loo_accuracy"] == 1.0
    )
    assert out["linear_probe_holdout_accuracy"] == 1.0
    assert out["class_orthogonality"] == pytest.approx(class_orthogonality(z[rows], y[rows]))
    assert out == EmbeddingMetrics(knn_k=10, max_samples=90, seed=3, progress=False)((z, y))  # seeded


def test_embedding_metrics_collapse_warning_fires_only_on_collapse(caplog: pytest.LogCaptureFixture) -> None:
    g = torch.Generator().manual_seed(0)
    collapsed = torch.ones(64, 8) + 0.01 * torch.randn(64, 8, generator=g)
    metrics = EmbeddingMetrics(progress=False)
    with caplog.at_level(logging.WARNING, logger="hf_contrast.metrics.collapse"):
        with pytest.warns(
            RepresentationCollapseWarning,
            match=r"mean pairwise cosine .* > 0\.95.*learning rate.*temperature.*BatchNorm",
        ):
            metrics((collapsed, None))
    assert any("has collapsed" in record.message for record in caplog.records)
    line = torch.randn(64, 1, generator=g) @ torch.randn(1, 8, generator=g) + 1e-3 * torch.randn(64, 8, generator=g)
    with pytest.warns(RepresentationCollapseWarning, match=r"effective rank .* < 2"):
        metrics((line, None))
    healthy, labels = _clusters(30, classes=4, dim=16, noise=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RepresentationCollapseWarning)
        metrics((healthy, labels))
    EmbeddingMetrics(progress=False, warn_collapse=False)((collapsed, None))  # no warning when switched off


def test_only_the_main_process_says_the_representation_collapsed(monkeypatch, caplog) -> None:  # noqa: ANN001
    """Every process of a distributed run scores the same gathered predictions: the collapse is said once (by rank
    0), not once per process; the metrics are the same on every rank."""
    import hf_contrast.distributed as distributed

    collapsed = torch.ones(64, 8) + 0.01 * torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    metrics = EmbeddingMetrics(progress=False)
    with pytest.warns(RepresentationCollapseWarning):
        on_main = metrics((collapsed, None))
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_contrast.metrics.collapse"), warnings.catch_warnings():
        warnings.simplefilter("error", RepresentationCollapseWarning)
        assert metrics((collapsed, None)) == on_main
    assert not [record for record in caplog.records if "has collapsed" in record.message]


def test_embedding_metrics_bad_input_and_small_sets() -> None:
    z, y = _clusters(3)
    with pytest.raises(ValueError, match="tuple \\(embeddings, view1, view2\\)"):
        EmbeddingMetrics(progress=False)(EvalPrediction(predictions=(z, z), label_ids=y))
    with pytest.raises(ValueError, match=r"`label_ids` must have shape \(9,\)"):
        EmbeddingMetrics(progress=False)((z, y[:4]))
    with pytest.raises(ValueError, match="`knn_k` must be an integer >= 1"):
        EmbeddingMetrics(knn_k=0)
    for flag in ("probe", "warn_collapse", "progress"):  # bool(tensor) raised RuntimeError; bool("no") was True
        for value in (torch.tensor([1.0, 0.0]), "no", 1):
            with pytest.raises(InputError, match=f"`{flag}` must be True or False"):
                EmbeddingMetrics(**{flag: value})
    with pytest.warns(UserWarning, match="knn_k=20 exceeds the 8 other rows; using k=8"):
        out = EmbeddingMetrics(progress=False)((z, y))
    assert out["knn_loo_accuracy"] == pytest.approx(knn_accuracy(z, y, k=8))
    with pytest.warns(UserWarning, match="linear_probe_holdout_accuracy left out"):
        out = EmbeddingMetrics(knn_k=2, progress=False)((z[:4], torch.tensor([0, 1, 2, 3])))  # no class has 2 rows
    assert "linear_probe_holdout_accuracy" not in out


def test_embedding_metrics_as_trainer_compute_metrics(tmp_path) -> None:
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    z, y = _clusters(12)  # class-sorted

    class _Embed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))

        def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
            e = pixel_values * self.scale
            return {"loss": e.pow(2).mean(), "embeddings": e}

    class _Rows(Dataset):
        def __len__(self) -> int:
            return len(y)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"pixel_values": z[i].float(), "labels": y[i]}

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, per_device_eval_batch_size=5)
    trainer = Trainer(
        model=_Embed(),
        args=args,
        eval_dataset=_Rows(),
        compute_metrics=EmbeddingMetrics(knn_k=5, max_samples=30, progress=False),
    )
    metrics = trainer.evaluate()
    expected = EmbeddingMetrics(knn_k=5, max_samples=30, progress=False)((z.float(), y))
    for key, value in expected.items():
        assert metrics[f"eval_{key}"] == pytest.approx(value, rel=1e-5), key
    assert trainer.state.log_history[-1]["eval_knn_loo_accuracy"] == metrics["eval_knn_loo_accuracy"]


# --------------------------------------------------------------------------- encode_dataset
def test_encode_dataset_texts_labels_iterable_and_errors() -> None:
    import datasets

    encoder = tiny_text_encoder().train()
    rows = {"text": ["the cat sat", "a dog", "hello world", "the red car", "a man"], "label": [0, 1, 0, 1, 1]}
    z, labels = encode_dataset(encoder, datasets.Dataset.from_dict(rows), batch_size=2, progress=False)
    assert z.shape == (5, encoder.embedding_dim) and labels.tolist() == rows["label"] and encoder.training
    with torch.no_grad():
        encoder.eval()
        direct = encoder(**encoder.tokenizer(rows["text"][:2], padding=True, return_tensors="pt")).embeddings
    assert torch.allclose(z[:2], direct, atol=1e-5)
    streamed, streamed_labels = encode_dataset(
        encoder, datasets.Dataset.from_dict(rows).to_iterable_dataset(), batch_size=2, progress=False
    )
    assert torch.allclose(streamed, z, atol=1e-6) and torch.equal(streamed_labels, labels)
    projections, none = encode_dataset(encoder, rows["text"], output="projections", label_column=None, progress=False)
    assert projections.shape == (5, 16) and none is None
    with pytest.raises(ValueError, match="`dataset` is empty"):
        encode_dataset(encoder, [], progress=False)
    with pytest.raises(ValueError, match="either `collate_fn`"):
        encode_dataset(encoder, rows["text"], collate_fn=list, transform=str)
    with pytest.raises(ValueError, match="`input_column` 'sentence' is not in the rows"):
        encode_dataset(encoder, [{"text": "a"}], input_column="sentence", progress=False)
    with pytest.raises(ValueError, match="Only 1 of 2 rows have labels"):
        encode_dataset(encoder, [{"text": "a", "label": 0}, {"text": "b"}], batch_size=1, progress=False)


# ------------------------------------------------------------------------------ evaluators
def test_sts_evaluator_equals_scipy_spearman_of_cosine() -> None:
    """The scores come from sentence-transformers' EmbeddingSimilarityEvaluator; they equal SciPy's
    Spearman / Pearson of the cosines and the package's own `sts_spearman` of the same embeddings."""
    from scipy.stats import pearsonr, spearmanr

    from hf_contrast.metrics import sts_spearman

    encoder = tiny_text_encoder()
    s1 = ["the cat sat on the mat", "a dog", "hello world", "the red car", "a man and a woman", "the dog sat"]
    s2 = ["the cat is on a mat", "a red dog", "world", "a car", "the woman", "a cat sat"]
    scores = [4.5, 3.0, 2.0, 3.5, 1.0, 2.5]
    encoder.train()
    result = STSEvaluator(s1, s2, scores, batch_size=4)(encoder)
    assert encoder.training  # mode restored
    encoder.eval()
    with torch.no_grad():
        a = encoder(**encoder.tokenizer(s1, padding=True, return_tensors="pt")).embeddings.numpy()
        b = encoder(**encoder.tokenizer(s2, padding=True, return_tensors="pt")).embeddings.numpy()
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert list(result) == ["sts_spearman", "sts_pearson"]
    assert result["sts_spearman"] == pytest.approx(spearmanr(cos, scores).statistic, abs=1e-6)
    assert result["sts_pearson"] == pytest.approx(pearsonr(cos, scores).statistic, abs=1e-5)  # float32 cosines
    assert result["sts_spearman"] == pytest.approx(
        sts_spearman(torch.from_numpy(a), torch.from_numpy(b), torch.tensor(scores)), abs=1e-6
    )
    evaluator = STSEvaluator.from_dataset({"s1": s1, "s2": s2, "y": scores}, "s1", "s2", "y", name="sick")
    assert evaluator.primary_metric == "sick_spearman" and evaluator.greater_is_better
    with pytest.raises(ValueError, match="must have the same length"):
        STSEvaluator(s1, s2[:3], scores)
    with pytest.raises(ValueError, match=r"no column\(s\) \['score'\]"):
        STSEvaluator.from_dataset({"sentence1": s1, "sentence2": s2})
    import datasets

    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": scores})}
    )
    with pytest.raises(
        InputTypeError,
        match=r"must be one split \(e\.g\. dataset\['test'\]\), got a DatasetDict of the splits \['train'\]",
    ):
        STSEvaluator.from_dataset(splits)  # it said "no column(s) [...] (columns: ['train'])"
    with pytest.raises(
        InputTypeError, match=r"`fit_dataset` must be one split .* DatasetDict of the splits \['train'\]"
    ):
        ProbeEvaluator(splits, splits["train"], label_column="score")  # the same check, one place


def test_embedding_evaluator_prefixes_metrics_and_restores_mode() -> None:
    encoder = tiny_text_encoder().train()
    texts = ["the cat", "a cat sat", "the cat sat", "a dog", "the dog", "a red dog"] * 2
    labels = [0, 0, 0, 1, 1, 1] * 2
    evaluator = EmbeddingEvaluator(
        [{"text": t, "label": l} for t, l in zip(texts, labels)],
        metrics=EmbeddingMetrics(knn_k=3, progress=False, warn_collapse=False),
        progress=False,
    )
    out = evaluator(encoder)
    assert encoder.training
    expected = EmbeddingMetrics(knn_k=3, progress=False, warn_collapse=False)(
        (encode_dataset(encoder, texts, label_column=None, progress=False)[0], torch.tensor(labels))
    )
    assert out == pytest.approx({f"embedding_{k}": v for k, v in expected.items()})
    assert evaluator.primary_metric == "embedding_knn_loo_accuracy"


_SENTENCES = [
    ("the cat sat", 0), ("a cat sat on a mat", 0), ("the cat is here", 0), ("cats sat", 0), ("a small cat", 0),
    ("a dog ran", 1), ("the dog ran far", 1), ("dogs ran", 1), ("the red dog", 1), ("a dog is here", 1),
    ("hello world", 2), ("the world is big", 2), ("a new world", 2), ("world peace", 2), ("hello there world", 2),
]  # fmt: skip


def _sentence_rows(indices) -> list[dict]:  # noqa: ANN001
    return [{"text": _SENTENCES[i][0], "label": _SENTENCES[i][1]} for i in indices]


def test_probe_evaluator_equals_scikit_learn_on_the_encoded_splits() -> None:
    """Fit on one split, score on the other.

    The four numbers equal scikit-learn run directly on the same embeddings.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    encoder = tiny_text_encoder().train()
    fit, score = _sentence_rows(range(0, 15, 2)), _sentence_rows(range(1, 15, 2))
    evaluator = ProbeEvaluator(fit, score, knn_k=3, knn_temperature=0.5, seed=1, batch_size=4, progress=False)
    out = evaluator(encoder)
    assert encoder.training  # mode restored
    assert list(out) == ["linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"]
    fit_z = encode_dataset(encoder, [r["text"] for r in fit], label_column=None, progress=False)[0].numpy()
    score_z = encode_dataset(encoder, [r["text"] for r in score], label_column=None, progress=False)[0].numpy()
    fit_y, score_y = [r["label"] for r in fit], [r["label"] for r in score]
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=1))
    knn = KNeighborsClassifier(3, metric="cosine", weights=lambda d: np.exp(-d / 0.5), algorithm="brute")
    for name, estimator in (("linear_probe", probe), ("knn", knn)):
        predicted = estimator.fit(fit_z, fit_y).predict(score_z)
        assert out[f"{name}_accuracy"] == pytest.approx(accuracy_score(score_y, predicted)), name
        assert out[f"{name}_macro_f1"] == pytest.approx(f1_score(score_y, predicted, average="macro")), name
    encoded = evaluator.encode(encoder)  # the splits as the evaluator encodes them, and its numbers from them
    assert encoder.training  # mode restored
    for features, expected in zip(encoded, (fit_z, fit_y, score_z, score_y), strict=True):
        assert np.allclose(np.asarray(features), np.asarray(expected), atol=1e-6)
    assert evaluator.score(*encoded) == out
    named = ProbeEvaluator(fit, score, name="topics", knn_k=3, knn_temperature=0.5, seed=1, progress=False)
    assert named(encoder) == pytest.approx({f"topics_{k}": v for k, v in out.items()})
    assert named.primary_metric == "topics_knn_accuracy" and evaluator.primary_metric == "knn_accuracy"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("batch_size", 0, "`batch_size` must be an integer in \\[1, "),
        ("batch_size", 10**30, "`batch_size` must be an integer in \\[1, "),  # was the DataLoader's ValueError
        ("output", 3, "`output` must be a non-empty model output name"),
        ("max_length", 0, r"`max_length` must be an integer in \[1, 2147483647\]"),
        ("collate_fn", "rows", "`collate_fn` must be callable"),
        ("input_column", ["text"], "`input_column` must be a non-empty column name"),
        ("on_bad_image", "ignore", "`on_bad_image` must be one of"),
    ],
)
def test_evaluators_check_the_encoding_options_when_built(option, value, message) -> None:
    # they were checked by encode_dataset at the first evaluation, after the first stretch of training
    rows = _sentence_rows(range(15))
    with pytest.raises(InputError, match=message):
        ProbeEvaluator(rows, rows, progress=False, **{option: value})
    if option != "on_bad_image":  # EmbeddingEvaluator takes no on_bad_image
        with pytest.raises(InputError, match=message):
            EmbeddingEvaluator(rows, progress=False, **{option: value})
    with pytest.raises(InputError, match=message):
        encode_dataset(nn.Linear(2, 2), rows, **{option: value})


def test_probe_evaluator_bad_arguments_and_unlabelled_rows() -> None:
    rows = _sentence_rows(range(15))
    with pytest.raises(ValueError, match="`primary` must be one of"):
        ProbeEvaluator(rows, rows, primary="knn_loo_accuracy")
    with pytest.raises(ValueError, match="`label_column` must name the label column"):
        ProbeEvaluator(rows, rows, label_column=None)
    with pytest.raises(ValueError, match="`knn_temperature` must be > 0"):
        ProbeEvaluator(rows, rows, knn_temperature=0)
    unlabelled = [{"text": r["text"]} for r in rows]
    with pytest.raises(ValueError, match="`score_dataset` has no labels in `label_column`='label'"):
        ProbeEvaluator(rows, unlabelled, knn_k=3, progress=False)  # at construction, before any training


def test_probe_evaluator_as_the_trainers_evaluator(tmp_path) -> None:
    """``evaluator=ProbeEvaluator(train, test)``: ``eval_linear_probe_accuracy`` … next to the within-split
    ``eval_knn_loo_accuracy`` / ``eval_linear_probe_holdout_accuracy`` of ``EmbeddingMetrics`` (other numbers,
    other names).
    """
    from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder

    from hf_contrast.training import SimCLRTrainer

    train, test = image_dataset(n=24, size=16, seed=0), image_dataset(n=16, size=16, seed=1)
    probe = ProbeEvaluator(train, test, knn_k=5, batch_size=8, progress=False)
    model = vit_encoder()
    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path, knn_k=5), train_dataset=train, eval_dataset=test, evaluator=probe
    )
    metrics = trainer.evaluate()
    expected = probe(model)
    for key in ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"):
        assert metrics[f"eval_{key}"] == pytest.approx(expected[key]), key
    assert {"eval_knn_loo_accuracy", "eval_linear_probe_holdout_accuracy", "eval_alignment"} <= set(metrics)
    z, y = encode_dataset(model, test, progress=False)
    assert metrics["eval_knn_loo_accuracy"] == pytest.approx(knn_accuracy(z, y, k=5), abs=1e-12)


class _Flatten(nn.Module):
    """Stand-in encoder: projections are the flattened input (input rotations are exact)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        z = pixel_values.flatten(1) * self.scale
        return {"embeddings": z, "projections": z}


def _rotate_batch(x: torch.Tensor) -> torch.Tensor:
    """One random rotation (global RNG) applied to every flattened row."""
    q, r = torch.linalg.qr(torch.randn(x[0].numel(), x[0].numel()))
    q = q * torch.sign(torch.diagonal(r))
    return (x.flatten(1) @ q.T).reshape(x.shape)


def _jitter(x: torch.Tensor) -> torch.Tensor:
    return x + 0.3 * torch.randn_like(x)


def test_equivariance_evaluator_exact_rotation_determinism_and_mode() -> None:
    batch = {"pixel_values": torch.randn(16, 1, 2, 3, generator=torch.Generator().manual_seed(1))}
    model = _Flatten().train()
    rng_before = torch.get_rng_state()
    exact = EquivarianceEvaluator(batch, _rotate_batch, num_augmentations=3)(model)
    assert torch.equal(torch.get_rng_state(), rng_before) and model.training
    assert exact["equivariance_wahba_error"] < 1e-5 and exact["equivariance_relative_rotational_equivariance"] < 1e-10
    noisy = EquivarianceEvaluator(batch, _jitter, num_augmentations=2, seed=3)
    first, second = noisy(model), noisy(model)
    assert first == second  # the same augmentations at every call
    assert (
        first["equivariance_wahba_error"] > 0.1
        and first["equivariance_wahba_error_max"] >= first["equivariance_wahba_error"]
    )
    assert [h["call"] for h in noisy.history] == [0.0, 0.0, 1.0, 1.0]
    assert noisy.primary_metric == "equivariance_wahba_error" and not noisy.greater_is_better
    with pytest.raises(ValueError, match="`augment_key` 'input_ids' is not a key"):
        EquivarianceEvaluator(batch, _jitter, augment_key="input_ids")
    with pytest.raises(ValueError, match="augment` must keep the batch size"):
        EquivarianceEvaluator(batch, lambda x: x[:4])(model, on_error="raise")
    assert model.training  # restored after an error too


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("augment_key", [], "`augment_key` must be a non-empty key of `batch`"),  # was TypeError: unhashable list
        ("output", 3, "`output` must be a non-empty model output name"),  # was accepted, failed at the first call
        ("normalize", "no", "`normalize` must be True or False"),
        ("seed", -1, r"`seed` must be an integer in \[0, 9223372036854775806\]"),
    ],
)
def test_equivariance_evaluator_checks_its_arguments_when_built(argument, value, message) -> None:
    batch = {"pixel_values": torch.randn(4, 1, 2, 3)}
    with pytest.raises(InputError, match=message):
        EquivarianceEvaluator(batch, _jitter, **{argument: value})


def test_equivariance_evaluator_from_a_class_sorted_image_dataset() -> None:
    from PIL import Image

    g = np.random.default_rng(0)
    images = [Image.fromarray(g.integers(0, 255, (12, 12, 3), dtype=np.uint8)) for _ in range(12)]
    rows = [{"image": im, "label": i // 4} for i, im in enumerate(images)]  # sorted by class
    config = {"input_size": (3, 8, 8), "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25)}
    evaluator = EquivarianceEvaluator.from_image_dataset(rows, config, num_samples=6, num_augmentations=2)
    assert evaluator.batch["pixel_values"].shape == (6, 3, 8, 8)
    chosen = balanced_subset(torch.tensor([r["label"] for r in rows]), 6, 0)
    assert torch.bincount(torch.tensor([rows[i]["label"] for i in chosen])).tolist() == [2, 2, 2]
    out = evaluator(_Flatten())
    assert np.isfinite(out["equivariance_wahba_error"]) and out["equivariance_wahba_error"] > 0


def _overshooting_rows(n: int = 16, side: int = 12) -> list[dict]:
    """Saturated two-level colour images: bicubic resampling of them as floats leaves [0, 1]."""
    from PIL import Image

    g = np.random.default_rng(1)
    return [
        {"image": Image.fromarray((g.integers(0, 2, (side, side, 3)) * 255).astype(np.uint8)), "label": i % 4}
        for i in range(n)
    ]


def test_equivariance_views_are_made_from_uint8_images_and_stay_finite() -> None:
    """The views of the main job's evaluator: images that make bicubic resampling overshoot, under draws
    with colour jitter. Made from float images these gave NaN pixels (a crash at the first evaluation)."""
    from hf_contrast.views import simclr_transform_from_data_config

    rows = _overshooting_rows()
    config = {"input_size": (3, 32, 32), "mean": (0.49, 0.48, 0.45), "std": (0.25, 0.24, 0.26),
              "interpolation": "bicubic", "crop_pct": 1.0}  # fmt: skip
    evaluator = EquivarianceEvaluator.from_image_dataset(rows, config, num_samples=16, num_augmentations=64)
    f, views = evaluator.embeddings(_Flatten())
    assert all(torch.isfinite(v).all() for v in views)
    # the fixed batch is the uint8 images, normalised: un-normalising gives integers / 255 exactly
    mean, std = torch.tensor(config["mean"]).view(1, 3, 1, 1), torch.tensor(config["std"]).view(1, 3, 1, 1)
    levels = (evaluator.batch["pixel_values"] * std + mean) * 255
    assert torch.allclose(levels, levels.round(), atol=1e-3)
    # each augmented batch is one SimCLR draw on those uint8 images, as training makes views
    augmented = evaluator.augment(evaluator.batch["pixel_values"][:2].clone())
    assert augmented.dtype == torch.float32 and torch.isfinite(augmented).all()
    # the float path of the transform itself is clamped before the colour steps (it gave NaN before)
    transform = simclr_transform_from_data_config(config)
    floats = torch.randint(0, 2, (64, 3, 32, 32), generator=torch.Generator().manual_seed(0)) * 1.0
    with torch.random.fork_rng():
        bad = 0
        for seed in range(60):
            torch.manual_seed(seed)
            bad += int(not torch.isfinite(transform(floats)).all())
    assert bad == 0


def test_a_failing_evaluator_warns_once_and_reports_nan_for_each_metric() -> None:
    from hf_contrast.evaluation import EvaluationFailedWarning

    class _Broken(Evaluator):
        metric_names = ("a", "b")
        calls = 0

        def __init__(self) -> None:
            super().__init__("broken", "a", greater_is_better=True)

        def compute(self, model: nn.Module) -> dict[str, float]:
            self.calls += 1
            raise ValueError("`f_a` contains NaN or infinite values")

    class _Fine(Evaluator):
        def __init__(self) -> None:
            super().__init__("fine", "x", greater_is_better=True)

        def compute(self, model: nn.Module) -> dict[str, float]:
            return {"x": 1.0}

    model = _Flatten().train()
    broken = _Broken()
    with pytest.warns(
        EvaluationFailedWarning, match=r"_Broken \('broken'\) could not compute a, b: ValueError: `f_a`"
    ):
        first = broken(model)
    assert set(first) == {"broken_a", "broken_b"} and all(np.isnan(v) for v in first.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second failure of the same metric is not reported again
        second = SequentialEvaluator([_Fine(), broken])(model)
    assert second["fine_x"] == 1.0 and np.isnan(second["broken_a"]) and broken.calls == 2 and model.training
    with pytest.raises(ValueError, match="NaN or infinite"):
        broken(model, on_error="raise")
    with pytest.raises(ValueError, match="NaN or infinite"):
        SequentialEvaluator([_Fine(), broken])(model, on_error="raise")
    with pytest.raises(ValueError, match="`on_error` must be 'warn' or 'raise'"):
        broken(model, on_error="ignore")


def test_embedding_metrics_reports_nan_for_a_metric_that_fails_and_keeps_the_others() -> None:
    from hf_contrast.evaluation import EvaluationFailedWarning

    z, y = _clusters(10)
    metrics = EmbeddingMetrics(seed=0)
    with pytest.warns(EvaluationFailedWarning, match="^EmbeddingMetrics could not compute knn_loo_accuracy"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(metrics, "_knn", lambda z, y: (_ for _ in ()).throw(RuntimeError("solver diverged")))
            out = metrics.compute(z, y)
    assert (
        np.isnan(out["knn_loo_accuracy"]) and np.isfinite(out["uniformity"]) and 0 <= out["class_orthogonality"] <= 1
    )


def test_sequential_evaluator_merges_and_rejects_clashes() -> None:
    class _Const(Evaluator):
        def __init__(self, name: str, value: float) -> None:
            super().__init__(name, "value", greater_is_better=False)
            self.value = value

        def compute(self, model: nn.Module) -> dict[str, float]:
            assert not model.training
            return {"value": self.value}

    model = _Flatten().train()
    both = SequentialEvaluator([_Const("a", 1.0), _Const("b", 2.0)], primary=1)
    assert both(model) == {"a_value": 1.0, "b_value": 2.0} and model.training
    assert both.primary_metric == "b_value" and not both.greater_is_better
    with pytest.raises(ValueError, match="distinct names"):
        SequentialEvaluator([_Const("a", 1.0), _Const("a", 2.0)])
    with pytest.raises(ValueError, match="`primary` must be an index"):
        SequentialEvaluator([_Const("a", 1.0)], primary=1)
    for bad in (None, _Const("a", 1.0), "a"):  # not a list: a TypeError from list() used to escape
        with pytest.raises(InputTypeError, match="`evaluators` must be a"):
            SequentialEvaluator(bad)


@settings(max_examples=40, deadline=None)
@given(
    probe=st.booleans(), views=st.booleans(), labelled=st.booleans(), classes=st.integers(1, 4),
    per_class=st.integers(2, 6), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_embedding_metrics_return_the_names_they_say_in_that_order(
    probe: bool, views: bool, labelled: bool, classes: int, per_class: int, seed: int
) -> None:
    """``possible_metrics`` is what the trainer checks ``metric_for_best_model`` against: a call returns those
    names, in that order, less only a metric that cannot apply (the probe or class orthogonality of one class)."""
    z, labels = _clusters(per_class, classes=classes, seed=seed)
    pair = (z + 0.1, z - 0.1) if views else None
    metrics = EmbeddingMetrics(knn_k=3, probe=probe, progress=False, warn_collapse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # knn_k above a small set's rows, the probe left out of one class
        got = list(metrics.compute(z, labels if labelled else None, pair))
    said = metrics.possible_metrics(views, labelled)
    assert got == [name for name in said if name in got]
    missing = set(said) - set(got)
    assert missing <= {"linear_probe_holdout_accuracy", "class_orthogonality"}
    assert not missing or classes == 1
    assert set(said) <= set(metrics.possible_metrics())  # the defaults: every name


def test_evaluators_say_the_keys_they_return() -> None:
    encoder = tiny_text_encoder()
    embedding = EmbeddingEvaluator(
        _sentence_rows(range(15)), metrics=EmbeddingMetrics(knn_k=3, progress=False), progress=False
    )
    probe = ProbeEvaluator(_sentence_rows(range(0, 15, 2)), _sentence_rows(range(1, 15, 2)), knn_k=3, progress=False)
    both = SequentialEvaluator([embedding, probe])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for evaluator in (embedding, probe, both):
            assert list(evaluator(encoder)) == list(evaluator.possible_metrics())
    unlabelled = EmbeddingEvaluator(
        [{"text": t} for t, _ in _SENTENCES], label_column=None, metrics=EmbeddingMetrics(progress=False),
        primary="uniformity", progress=False,
    )  # fmt: skip
    said = ("embedding_uniformity", "embedding_mean_cosine", "embedding_effective_rank")
    assert unlabelled.possible_metrics() == said
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tuple(unlabelled(encoder)) == said

    class _Unsaid(Evaluator):  # no fixed metric_names: its keys are known only after a call
        def compute(self, model: nn.Module) -> dict[str, float]:
            return {"x": 1.0}

    assert _Unsaid("u", "x", True).possible_metrics() is None
    assert SequentialEvaluator([probe, _Unsaid("u", "x", True)]).possible_metrics() is None


def test_sts_evaluator_refuses_a_missing_or_non_numeric_column_naming_it() -> None:
    pairs = {"sentences1": ["a cat", "a dog"], "sentences2": ["a mat", "a car"], "scores": [1.0, 2.0]}
    for name, bad in [("sentences1", None), ("sentences2", "a mat"), ("scores", None), ("scores", 3.0)]:
        with pytest.raises(InputTypeError, match=f"`{name}` must be a sequence"):
            STSEvaluator(**{**pairs, name: bad})
    for bad in (["1.5", 2.0], [None, 2.0], [1.0, True]):
        with pytest.raises(InputTypeError, match=r"`scores\[\d\]` must be a number"):
            STSEvaluator(**{**pairs, "scores": bad})
    assert STSEvaluator(**{**pairs, "scores": (np.float32(1), torch.tensor(2.0))}).scores == [1.0, 2.0]
    with pytest.raises(ValueError, match="`output` must be a non-empty"):
        STSEvaluator(**pairs, output="")
    with pytest.raises(ValueError, match=r"`max_length` must be an integer in \[1, 2147483647\] or None"):
        STSEvaluator(**pairs, max_length=0)


def _image_rows_with_bad_files(tmp_path) -> list[dict]:  # noqa: ANN001
    """Six labelled PNG rows as undecoded ``{"path", "bytes"}`` dicts; rows 2 (0 bytes) and 4 (truncated) are bad."""
    from PIL import Image

    rows = []
    for i in range(6):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (12, 12), (40 * i, 0, 0)).save(path)
        rows.append({"image": {"path": str(path), "bytes": None}, "label": i % 2})
    (tmp_path / "2.png").write_bytes(b"")
    (tmp_path / "4.png").write_bytes((tmp_path / "4.png").read_bytes()[:40])
    return rows


def test_encode_dataset_names_or_skips_a_bad_image(tmp_path) -> None:  # noqa: ANN001
    import timm  # noqa: F401 (the tiny timm model)

    from hf_contrast.data.decode import BadImageError
    from hf_contrast.models import ContrastiveEncoder

    rows = _image_rows_with_bad_files(tmp_path)
    encoder = ContrastiveEncoder.from_backbone("test_resnet", pretrained=False, projection_dim=8)
    encoder.set_image_size(16)
    with pytest.raises(BadImageError, match=r"encode_dataset: row 2\b.*2\.png"):
        encode_dataset(encoder, rows, batch_size=4, progress=False)
    with pytest.warns(UserWarning, match=r"Skipped: encode_dataset: row 4\b.*4\.png"):
        z, y = encode_dataset(encoder, rows, batch_size=4, progress=False, on_bad_image="skip")
    good = [rows[i] for i in (0, 1, 3, 5)]
    z_good, y_good = encode_dataset(encoder, good, batch_size=4, progress=False)
    assert torch.equal(y, y_good) and torch.allclose(z, z_good, atol=1e-6)  # the bad rows and their labels left out
    probe = ProbeEvaluator(rows, rows, batch_size=4, progress=False, on_bad_image="skip", knn_k=2)
    with pytest.warns(UserWarning, match="Skipped"):
        assert set(probe(encoder, on_error="raise")) == {
            "linear_probe_accuracy",
            "linear_probe_macro_f1",
            "knn_accuracy",
            "knn_macro_f1",
        }
    with pytest.raises(ValueError, match="on_bad_image"):
        ProbeEvaluator(rows, rows, on_bad_image="ignore")


def test_equivariance_evaluator_from_images_names_or_skips_a_bad_file(tmp_path) -> None:  # noqa: ANN001
    from hf_contrast.data.decode import BadImageError

    rows = _image_rows_with_bad_files(tmp_path)
    config = {"input_size": (3, 16, 16), "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    with pytest.raises(BadImageError, match=r"EquivarianceEvaluator: row [24]\b.*[24]\.png"):
        EquivarianceEvaluator.from_image_dataset(rows, config, num_samples=6, label_column=None)
    with pytest.warns(UserWarning, match="Skipped: EquivarianceEvaluator"):
        evaluator = EquivarianceEvaluator.from_image_dataset(
            rows, config, num_samples=6, label_column=None, on_bad_image="skip"
        )
    assert evaluator.batch["pixel_values"].shape == (4, 3, 16, 16)  # the 4 readable images
