"""The offline ``evaluate`` modules: add_batch + compute equals the plain metric functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_contrast.metrics import (
    alignment,
    class_orthogonality,
    effective_rank,
    knn_accuracy,
    relative_rotational_equivariance,
    uniformity,
    wahba_error,
)
from hf_contrast.metrics.evaluate_modules import (
    ClassOrthogonalityMetric,
    GeometryMetric,
    KNNAccuracyMetric,
    WahbaMetric,
)


@pytest.fixture
def views() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z1 = rng.standard_normal((24, 5)).astype(np.float32)
    return z1, (z1 + 0.2 * rng.standard_normal((24, 5))).astype(np.float32)


def test_geometry_metric_batches(views: tuple[np.ndarray, np.ndarray], tmp_path) -> None:
    z1, z2 = views
    metric = GeometryMetric(cache_dir=str(tmp_path))  # on-disk cache, as in distributed use
    metric.add_batch(predictions=z1[:10], references=z2[:10])
    metric.add_batch(predictions=torch.from_numpy(z1[10:]), references=list(z2[10:]))
    result = metric.compute()
    assert result["alignment"] == pytest.approx(alignment(z1, z2), rel=1e-9)
    assert result["uniformity"] == pytest.approx(uniformity(z1), rel=1e-9)
    assert result["effective_rank"] == pytest.approx(effective_rank(z1), rel=1e-9)
    # one definition per name: the evaluate module reports what EmbeddingMetrics reports
    from hf_contrast.evaluation import EmbeddingMetrics

    reference = EmbeddingMetrics(progress=False, warn_collapse=False)(((z1, z1, z2), None))
    for key in ("alignment", "uniformity", "mean_cosine", "effective_rank"):
        assert result[key] == pytest.approx(reference[key], rel=1e-6), key
    raw = GeometryMetric(keep_in_memory=True).compute(predictions=z1, references=z2, normalize=False)
    assert raw["alignment"] == pytest.approx(alignment(z1, z2, normalize=False), rel=1e-9)


def test_wahba_metric(views: tuple[np.ndarray, np.ndarray]) -> None:
    z1, z2 = views
    metric = WahbaMetric(keep_in_memory=True)
    for start in (0, 12):
        metric.add_batch(predictions=z2[start : start + 12], references=z1[start : start + 12])
    result = metric.compute()
    expected = wahba_error(z1, z2)
    assert result["wahba_error"] == pytest.approx(expected.error, rel=1e-9)
    assert result["wahba_error_per_sample"] == pytest.approx(expected.error / math.sqrt(24), rel=1e-9)
    assert result["relative_rotational_equivariance"] == pytest.approx(
        relative_rotational_equivariance(z1, z2), rel=1e-9
    )
    q, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((5, 5)))
    q[:, 0] *= np.sign(np.linalg.det(q))  # det +1
    rotated = WahbaMetric(keep_in_memory=True).compute(predictions=(z1 @ q.T).astype(np.float32), references=z1)
    assert rotated["wahba_error"] < 1e-4  # float32 storage


def test_knn_and_class_orthogonality_metrics(views: tuple[np.ndarray, np.ndarray]) -> None:
    z1, _ = views
    labels = np.arange(24) % 3
    knn = KNNAccuracyMetric(keep_in_memory=True)
    knn.add_batch(predictions=z1[:12], references=labels[:12])
    knn.add_batch(predictions=z1[12:], references=labels[12:])
    assert knn.compute(k=5) == pytest.approx({"knn_loo_accuracy": knn_accuracy(z1, labels, k=5)})
    bank = KNNAccuracyMetric(keep_in_memory=True).compute(
        predictions=z1[16:],
        references=labels[16:],
        train_embeddings=z1[:16],
        train_labels=labels[:16],
        k=3,
        temperature=0.5,
    )
    assert list(bank) == ["knn_accuracy"] and bank["knn_accuracy"] == pytest.approx(
        knn_accuracy(z1[:16], labels[:16], z1[16:], labels[16:], k=3, temperature=0.5)
    )
    orth = ClassOrthogonalityMetric(keep_in_memory=True).compute(predictions=z1, references=labels)
    assert orth["class_orthogonality"] == pytest.approx(class_orthogonality(z1, labels), rel=1e-9)


def test_evaluate_module_errors(views: tuple[np.ndarray, np.ndarray]) -> None:
    z1, _ = views
    with pytest.raises(ValueError, match="`train_embeddings` and `train_labels` must be given together"):
        KNNAccuracyMetric(keep_in_memory=True).compute(
            predictions=z1, references=np.arange(24) % 2, train_embeddings=z1
        )
    with pytest.raises(ValueError, match="at least two distinct classes"):
        ClassOrthogonalityMetric(keep_in_memory=True).compute(predictions=z1, references=np.zeros(24, dtype=np.int64))
    with pytest.raises(ValueError, match="`f` and `f_a` must have the same shape"):
        WahbaMetric(keep_in_memory=True).compute(predictions=z1[:, :4], references=z1)
