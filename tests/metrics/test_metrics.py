"""Tests of hf_contrast.metrics (docs/methods.md §7): reference loops, closed forms, scipy/sklearn."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from hf_contrast.metrics import (
    ConstantInputWarning,
    alignment,
    class_orthogonality,
    effective_rank,
    knn_accuracy,
    linear_probe_accuracy,
    mean_cosine,
    relative_rotational_equivariance,
    spearman_correlation,
    sts_spearman,
    uniformity,
    wahba_error,
)
from hf_contrast.metrics.sts import rankdata


def _rotation(d: int, generator: torch.Generator) -> torch.Tensor:
    """A random Q ∈ SO(d): QR of a Gaussian matrix with the sign and determinant fixed."""
    q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# ---------------------------------------------------------------------------- Wahba error
@pytest.mark.parametrize("d", [2, 3, 8])
def test_wahba_pure_rotation_is_zero_and_recovers_q(gen: torch.Generator, d: int) -> None:
    f = torch.randn(40, d, generator=gen, dtype=torch.float64)
    q = _rotation(d, gen)
    result = wahba_error(f, f @ q.T)
    assert result.error < 1e-10
    assert result.error_per_sample == pytest.approx(result.error / math.sqrt(40))
    torch.testing.assert_close(result.rotation, q, atol=1e-10, rtol=0)
    assert torch.linalg.det(result.rotation) == pytest.approx(1.0)


def test_wahba_matches_scipy_kabsch(gen: torch.Generator) -> None:
    rotation_cls = pytest.importorskip("scipy.spatial.transform").Rotation
    f = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    f_a = f @ _rotation(3, gen).T + 0.3 * torch.randn(30, 3, generator=gen, dtype=torch.float64)
    result = wahba_error(f, f_a)
    # scipy minimises sum_i ||a_i - C b_i||² over rotations C; a = f_a rows, b = f rows, so C = R*.
    reference, rssd = rotation_cls.align_vectors(f_a.numpy(), f.numpy())
    assert result.error == pytest.approx(rssd, rel=1e-9)
    np.testing.assert_allclose(result.rotation.numpy(), reference.as_matrix(), atol=1e-8)


def test_wahba_two_dimensional_brute_force(gen: torch.Generator) -> None:
    f = torch.randn(25, 2, generator=gen, dtype=torch.float64)
    f_a = torch.randn(25, 2, generator=gen, dtype=torch.float64)

    def objective(theta: float) -> float:
        c, s = math.cos(theta), math.sin(theta)
        r = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
        return float(torch.linalg.matrix_norm(f @ r.T - f_a))

    grid = np.linspace(0.0, 2 * math.pi, 20001)
    best = min(objective(t) for t in grid)
    assert wahba_error(f, f_a).error == pytest.approx(best, rel=1e-6)


def test_wahba_closed_forms(gen: torch.Generator) -> None:
    f = torch.randn(10, 4, generator=gen, dtype=torch.float64)
    # Scaling: the best rotation is the identity and W = |1 - c| ||F||.
    result = wahba_error(f, 2.0 * f)
    assert result.error == pytest.approx(float(torch.linalg.matrix_norm(f)))
    torch.testing.assert_close(result.rotation, torch.eye(4, dtype=torch.float64))
    # D = 1: SO(1) = {1}, so a sign flip cannot be undone (without the det fix R would be -1).
    g = torch.randn(10, 1, generator=gen, dtype=torch.float64)
    assert wahba_error(g, -g).error == pytest.approx(2 * float(g.norm()))


def test_wahba_reflection_is_not_a_rotation(gen: torch.Generator) -> None:
    f = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    reflection = torch.diag(torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64))
    result = wahba_error(f, f @ reflection)
    assert result.error > 0.1
    assert torch.linalg.det(result.rotation) == pytest.approx(1.0)
    torch.testing.assert_close(result.rotation.T @ result.rotation, torch.eye(3, dtype=torch.float64))


def test_wahba_normalize_and_numpy(gen: torch.Generator) -> None:
    f = torch.randn(12, 3, generator=gen, dtype=torch.float64)
    q = _rotation(3, gen)
    scaled = 3.0 * f @ q.T  # rotation + scale: not a pure rotation unless normalised
    assert wahba_error(f, scaled).error > 1.0
    assert wahba_error(f.numpy(), scaled.numpy(), normalize=True).error < 1e-10


def test_wahba_errors() -> None:
    with pytest.raises(ValueError, match="`f` and `f_a` must have the same shape"):
        wahba_error(torch.randn(5, 3), torch.randn(5, 4))
    with pytest.raises(ValueError, match=r"`f` must have shape \(n, D\)"):
        wahba_error(torch.randn(5), torch.randn(5))
    with pytest.raises(ValueError, match="`f_a` contains NaN"):
        wahba_error(torch.randn(5, 3), torch.full((5, 3), float("nan")))
    with pytest.raises(ValueError, match="`f` must be a floating-point tensor"):
        wahba_error(torch.ones(5, 3, dtype=torch.long), torch.randn(5, 3))


# ---------------------------------------------------------- relative rotational equivariance
def _gamma_loop(f: np.ndarray, fa: np.ndarray) -> float:
    """γ_f straight from docs/methods.md §7, skipping 0/0 pairs."""
    total, count = 0.0, 0
    n = f.shape[0]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            num = (np.sum((fa[j] - fa[i]) ** 2) - np.sum((f[j] - f[i]) ** 2)) ** 2
            den = (np.sum((fa[j] - f[j]) ** 2) + np.sum((fa[i] - f[i]) ** 2)) ** 2
            if den == 0:
                continue
            total += num / den
            count += 1
    return total / count


def test_gamma_matches_reference_loop(gen: torch.Generator) -> None:
    f = torch.randn(15, 4, generator=gen, dtype=torch.float64)
    f_a = f + 0.2 * torch.randn(15, 4, generator=gen, dtype=torch.float64)
    assert relative_rotational_equivariance(f, f_a) == pytest.approx(_gamma_loop(f.numpy(), f_a.numpy()), rel=1e-9)


def test_gamma_zero_for_rotation_and_scale_invariant(gen: torch.Generator) -> None:
    f = torch.randn(20, 5, generator=gen, dtype=torch.float64)
    assert relative_rotational_equivariance(f, f @ _rotation(5, gen).T) < 1e-20
    f_a = f + 0.1 * torch.randn(20, 5, generator=gen, dtype=torch.float64)
    assert relative_rotational_equivariance(3.0 * f, 3.0 * f_a) == pytest.approx(
        relative_rotational_equivariance(f, f_a), rel=1e-9
    )


def test_gamma_excludes_exactly_invariant_pairs(gen: torch.Generator) -> None:
    f = torch.randn(10, 3, generator=gen, dtype=torch.float64)
    f_a = f.clone()
    f_a[5:] += 0.5 * torch.randn(5, 3, generator=gen, dtype=torch.float64)  # rows 0..4 invariant
    value = relative_rotational_equivariance(f, f_a)
    assert math.isfinite(value)
    assert value == pytest.approx(_gamma_loop(f.numpy(), f_a.numpy()), rel=1e-9)
    with pytest.warns(UserWarning, match="undefined"):
        assert math.isnan(relative_rotational_equivariance(f, f.clone()))


def test_gamma_errors() -> None:
    with pytest.raises(ValueError, match="`f` needs at least 2 rows"):
        relative_rotational_equivariance(torch.randn(1, 3), torch.randn(1, 3))
    with pytest.raises(ValueError, match="`f` and `f_a` must have the same shape"):
        relative_rotational_equivariance(torch.randn(4, 3), torch.randn(5, 3))


# ------------------------------------------------------------------ alignment / uniformity
def test_alignment_and_uniformity_reference(gen: torch.Generator) -> None:
    x = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    xn, yn = x / x.norm(dim=1, keepdim=True), y / y.norm(dim=1, keepdim=True)
    align_ref = np.mean([float((xn[i] - yn[i]).norm() ** 1.5) for i in range(12)])
    assert alignment(x, y, alpha=1.5) == pytest.approx(align_ref, rel=1e-12)
    assert alignment(x, y, normalize=False) == pytest.approx(float(((x - y) ** 2).sum(1).mean()), rel=1e-12)
    pairs = [math.exp(-2.0 * float((xn[i] - xn[j]).pow(2).sum())) for i in range(12) for j in range(i + 1, 12)]
    assert uniformity(x) == pytest.approx(math.log(np.mean(pairs)), rel=1e-12)
    assert uniformity(x.numpy(), t=0.5, normalize=False) == pytest.approx(
        math.log(
            np.mean([math.exp(-0.5 * float((x[i] - x[j]).pow(2).sum())) for i in range(12) for j in range(i + 1, 12)])
        ),
        rel=1e-12,
    )


def test_alignment_uniformity_closed_forms() -> None:
    z = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert uniformity(z) == pytest.approx(-8.0)  # antipodal: log exp(-2·4)
    assert alignment(z, z) == 0.0
    with pytest.raises(ValueError, match="`alpha` must be > 0"):
        alignment(z, z, alpha=0.0)
    with pytest.raises(ValueError, match="`x` needs at least 2 rows"):
        uniformity(z[:1])


# ------------------------------------------------------------------- class orthogonality
def test_class_orthogonality_closed_forms() -> None:
    eye = torch.eye(4, dtype=torch.float64)
    delta = 0.3 * torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    # two samples per class, e_c ± δ: class means are exactly the orthonormal e_c (c = 0, 1, 2)
    z = torch.stack([eye[c] + s * delta for c in range(3) for s in (1.0, -1.0)])
    labels = torch.tensor([7, 7, 3, 3, 42, 42])
    assert class_orthogonality(z, labels) == pytest.approx(0.0, abs=1e-12)
    same = torch.tensor([[1.0, 2.0], [1.0, 2.0], [2.0, 4.0], [-1.0, -2.0]])
    assert class_orthogonality(same, torch.tensor([0, 0, 1, 2])) == pytest.approx(1.0)


def test_class_orthogonality_reference(gen: torch.Generator) -> None:
    z = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 4, (30,), generator=gen)
    for normalize in (False, True):
        zz = z / z.norm(dim=1, keepdim=True) if normalize else z
        means = [zz[labels == c].mean(0) for c in range(4)]
        ref = np.mean(
            [
                abs(float(torch.dot(means[a], means[b]) / (means[a].norm() * means[b].norm())))
                for a in range(4)
                for b in range(4)
                if a != b
            ]
        )
        assert class_orthogonality(z, labels, normalize=normalize) == pytest.approx(ref, rel=1e-12)


def test_class_orthogonality_errors() -> None:
    z = torch.randn(4, 3)
    with pytest.raises(ValueError, match="at least two distinct classes"):
        class_orthogonality(z, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`labels` must have shape \(4,\)"):
        class_orthogonality(z, torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="`labels` must have an integer dtype"):
        class_orthogonality(z, torch.tensor([0.0, 1.0, 0.0, 1.0]))


# ------------------------------------------------------------------------ effective rank
def test_effective_rank_closed_forms(gen: torch.Generator) -> None:
    q, _ = torch.linalg.qr(torch.randn(20, 6, generator=gen, dtype=torch.float64))
    assert effective_rank(q) == pytest.approx(6.0)  # isotropic: six equal singular values
    assert effective_rank(5.0 * q @ _rotation(6, gen)) == pytest.approx(6.0)
    rank_one = torch.randn(20, 1, generator=gen, dtype=torch.float64) @ torch.randn(
        1, 6, generator=gen, dtype=torch.float64
    )
    assert effective_rank(rank_one) == pytest.approx(1.0, abs=1e-9)
    assert effective_rank(torch.zeros(5, 3)) == 0.0
    z = torch.randn(20, 6, generator=gen, dtype=torch.float64)
    s = np.linalg.svd(z.numpy(), compute_uv=False)
    p = s / s.sum()
    assert effective_rank(z) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-12)


def test_mean_cosine_matches_pairwise_loop(gen: torch.Generator) -> None:
    z = torch.randn(17, 5, generator=gen, dtype=torch.float64)
    z[3] = 0.0  # a zero row has cosine 0 with every row
    u = z.numpy()
    norms = np.linalg.norm(u, axis=1)
    loop = [
        0.0 if norms[i] == 0 or norms[j] == 0 else float(u[i] @ u[j] / (norms[i] * norms[j]))
        for i in range(17)
        for j in range(17)
        if i != j
    ]
    assert mean_cosine(z) == pytest.approx(float(np.mean(loop)), abs=1e-12)
    same = torch.randn(1, 5, generator=gen).repeat(8, 1) * torch.arange(1, 9).unsqueeze(1)
    assert mean_cosine(same) == pytest.approx(1.0)  # collapsed to one direction
    assert mean_cosine(torch.eye(4)) == 0.0
    with pytest.raises(ValueError, match="at least 2 rows"):
        mean_cosine(torch.randn(1, 3))


# -------------------------------------------------------------------------------- kNN
def _knn_loop(
    train: np.ndarray, ytr: np.ndarray, test: np.ndarray, yte: np.ndarray, k: int, t: float, loo: bool
) -> float:
    train = train / np.linalg.norm(train, axis=1, keepdims=True)
    test = test / np.linalg.norm(test, axis=1, keepdims=True)
    correct = 0
    for i in range(len(test)):
        sims = [(float(test[i] @ train[j]), j) for j in range(len(train)) if not (loo and i == j)]
        sims.sort(key=lambda item: -item[0])
        scores: dict[int, float] = {}
        for s, j in sims[:k]:
            scores[int(ytr[j])] = scores.get(int(ytr[j]), 0.0) + math.exp(s / t)
        best = max(scores.values())
        predicted = min(c for c, v in scores.items() if v == best)
        correct += predicted == int(yte[i])
    return correct / len(test)


def test_knn_separable_clusters(gen: torch.Generator) -> None:
    centres = 10.0 * torch.eye(3, dtype=torch.float64)
    labels = torch.arange(60) % 3
    z = centres[labels] + torch.randn(60, 3, generator=gen, dtype=torch.float64)
    assert knn_accuracy(z[:40], labels[:40], z[40:], labels[40:], k=5) == 1.0
    assert knn_accuracy(z, labels, k=19) == 1.0  # leave-one-out


def test_knn_matches_reference_loop(gen: torch.Generator) -> None:
    z = torch.randn(50, 4, generator=gen, dtype=torch.float64)
    labels = torch.tensor([1, 5, 9])[torch.randint(0, 3, (50,), generator=gen)]
    ref = _knn_loop(z[:30].numpy(), labels[:30].numpy(), z[30:].numpy(), labels[30:].numpy(), 7, 0.1, False)
    assert knn_accuracy(z[:30], labels[:30], z[30:], labels[30:], k=7, temperature=0.1) == pytest.approx(ref)
    ref_loo = _knn_loop(z.numpy(), labels.numpy(), z.numpy(), labels.numpy(), 5, 0.07, True)
    assert knn_accuracy(z, labels, k=5) == pytest.approx(ref_loo)
    assert knn_accuracy(z, labels, k=5, batch_size=7) == pytest.approx(ref_loo)  # chunked == full
    assert 0.0 < ref < 1.0 and 0.0 < ref_loo < 1.0  # the data is not trivially separable


def test_knn_errors() -> None:
    z, y = torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"`k` must be an integer in \[1, 5\]"):
        knn_accuracy(z, y, k=6)
    with pytest.raises(ValueError, match=r"`k` must be an integer in \[1, 6\]"):
        knn_accuracy(z, y, z, y, k=0)
    with pytest.raises(ValueError, match="`test_z` and `test_y` must be given together"):
        knn_accuracy(z, y, z)
    with pytest.raises(ValueError, match="`test_z` must have the feature size of `train_z`"):
        knn_accuracy(z, y, torch.randn(6, 4), y, k=2)
    with pytest.raises(ValueError, match="`temperature` must be > 0"):
        knn_accuracy(z, y, k=2, temperature=0.0)
    with pytest.raises(ValueError, match=r"`train_y` must have shape \(6,\)"):
        knn_accuracy(z, y[:5], k=2)


# ------------------------------------------------------------------------- linear probe
def _logistic_reference(x: np.ndarray, y: np.ndarray, C: float) -> tuple[np.ndarray, np.ndarray]:
    """Minimise C·Σ CE(W x + b, y) + ½‖W‖² with scipy's L-BFGS (an independent multinomial fit)."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    n, d = x.shape
    k = int(y.max()) + 1
    onehot = np.eye(k)[y]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[: k * d].reshape(k, d), theta[k * d :]
        logits = x @ w.T + b
        log_p = logits - logsumexp(logits, axis=1, keepdims=True)
        loss = -C * (onehot * log_p).sum() + 0.5 * (w * w).sum()
        residual = C * (np.exp(log_p) - onehot)
        return loss, np.concatenate([(residual.T @ x + w).ravel(), residual.sum(0)])

    theta = minimize(
        objective, np.zeros(k * d + k), jac=True, method="L-BFGS-B", options={"gtol": 1e-10, "maxiter": 10_000}
    ).x
    return theta[: k * d].reshape(k, d), theta[k * d :]


def test_linear_probe_matches_scipy_reference(gen: torch.Generator) -> None:
    centres = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    labels = torch.arange(150) % 3
    z = centres[labels] + 1.2 * torch.randn(150, 6, generator=gen, dtype=torch.float64)
    z[:, 0] = 5.0 * z[:, 0] + 3.0  # badly scaled feature: standardisation matters
    tr, te = slice(0, 100), slice(100, 150)
    ours = linear_probe_accuracy(z[tr], labels[tr], z[te], labels[te], C=0.5)
    mean, std = z[tr].mean(0).numpy(), z[tr].std(0, correction=0).numpy()
    w, b = _logistic_reference((z[tr].numpy() - mean) / std, labels[tr].numpy(), C=0.5)
    predicted = (((z[te].numpy() - mean) / std) @ w.T + b).argmax(1)
    reference = float(np.mean(predicted == labels[te].numpy()))
    assert ours == pytest.approx(reference)
    assert 0.4 < ours < 1.0
    unscaled = linear_probe_accuracy(z[tr], labels[tr], z[te], labels[te], C=0.5, standardize=False)
    w, b = _logistic_reference(z[tr].numpy(), labels[tr].numpy(), C=0.5)
    assert unscaled == pytest.approx(float(np.mean((z[te].numpy() @ w.T + b).argmax(1) == labels[te].numpy())))


def test_linear_probe_separable_and_unseen_labels(gen: torch.Generator) -> None:
    labels = torch.tensor([2, 4, 8])[torch.arange(30) % 3]
    z = 10.0 * torch.nn.functional.one_hot(torch.arange(30) % 3).double() + torch.randn(
        30, 3, generator=gen, dtype=torch.float64
    )
    assert linear_probe_accuracy(z, labels, z, labels) == 1.0
    test_labels = labels.clone()
    test_labels[:3] = 99  # a class never seen in training cannot be predicted
    assert linear_probe_accuracy(z, labels, z, test_labels) == pytest.approx(27 / 30)


def test_linear_probe_errors() -> None:
    z = torch.randn(6, 3)
    with pytest.raises(ValueError, match="`train_y` must contain at least two classes"):
        linear_probe_accuracy(z, torch.zeros(6, dtype=torch.long), z, torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match="`C` must be > 0"):
        linear_probe_accuracy(z, torch.arange(6) % 2, z, torch.arange(6) % 2, C=0.0)
    with pytest.raises(ValueError, match=r"`test_y` must have shape \(6,\)"):
        linear_probe_accuracy(z, torch.arange(6) % 2, z, torch.arange(5) % 2)


# ---------------------------------------------------------------------------------- STS
def test_rankdata_and_spearman_match_scipy(gen: torch.Generator) -> None:
    stats = pytest.importorskip("scipy.stats")
    x = torch.randint(0, 5, (40,), generator=gen).double()  # many ties
    y = x + torch.randn(40, generator=gen, dtype=torch.float64)
    np.testing.assert_allclose(rankdata(x).numpy(), stats.rankdata(x.numpy()))
    assert spearman_correlation(x, y) == pytest.approx(stats.spearmanr(x.numpy(), y.numpy()).statistic, rel=1e-12)
    a = torch.randn(25, 6, generator=gen, dtype=torch.float64)
    b = a + torch.randn(25, 6, generator=gen, dtype=torch.float64)
    scores = torch.randint(0, 6, (25,), generator=gen).double()
    cos = torch.nn.functional.cosine_similarity(a, b).numpy()
    assert sts_spearman(a, b, scores) == pytest.approx(stats.spearmanr(cos, scores.numpy()).statistic, rel=1e-12)


def test_sts_spearman_closed_forms_and_errors() -> None:
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert sts_spearman(a, b, torch.tensor([5.0, 2.5, 0.0])) == pytest.approx(1.0)
    assert sts_spearman(a, b, torch.tensor([0.0, 1.0, 4.0])) == pytest.approx(-1.0)
    with pytest.warns(ConstantInputWarning, match=r"constant input \(`scores`\)") as caught:
        assert math.isnan(sts_spearman(a, b, torch.ones(3)))
    assert caught[0].filename == __file__  # the warning points at the caller
    # a zero embedding has cosine 0 with anything: all-zero `b` makes every cosine 0 (as sentence-transformers)
    with pytest.warns(ConstantInputWarning, match=r"constant input \(the cosines of `a` and `b`\)"):
        assert math.isnan(sts_spearman(a, torch.zeros(3, 2), torch.tensor([5.0, 2.5, 0.0])))
    with pytest.warns(ConstantInputWarning, match=r"constant input \(`x` and `y`\)"):
        assert math.isnan(spearman_correlation(torch.ones(4), torch.zeros(4)))
    with pytest.raises(ValueError, match=r"`scores` must have shape \(3,\)"):
        sts_spearman(a, b, torch.ones(4))
    with pytest.raises(ValueError, match="`a` and `b` must have the same shape"):
        sts_spearman(a, b[:2], torch.ones(3))


def test_sts_spearman_of_a_constant_input_is_nan_like_scipy_and_sentence_transformers() -> None:
    stats = pytest.importorskip("scipy.stats")
    with pytest.warns(stats.ConstantInputWarning):
        expected = stats.spearmanr([0.0, 0.0, 0.0], [5.0, 2.5, 0.0]).statistic
    assert math.isnan(expected)
    with pytest.warns(ConstantInputWarning):
        assert math.isnan(sts_spearman(torch.eye(3), torch.zeros(3, 3), torch.tensor([5.0, 2.5, 0.0])))


def test_metrics_import_does_not_load_evaluate() -> None:
    code = "import sys, hf_contrast.metrics; print('evaluate' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_macro_f1_matches_sklearn_and_rejects_bad_input() -> None:
    from sklearn.metrics import f1_score

    from hf_contrast.metrics import macro_f1

    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, 5, (200,), generator=g)
    p = torch.where(torch.rand(200, generator=g) < 0.6, y, torch.randint(0, 6, (200,), generator=g))
    assert macro_f1(p, y) == pytest.approx(f1_score(y.numpy(), p.numpy(), average="macro"), abs=1e-12)
    assert macro_f1(y, y) == 1.0
    with pytest.raises(ValueError, match="`predicted`"):
        macro_f1(p[:10], y)
    with pytest.raises(ValueError, match="`num_classes`"):
        macro_f1(p, y, num_classes=3)


# ------------------------------------------------------------- probes fitted on one split, scored on another
def _sklearn_probe_scores(train_z, train_y, test_z, test_y, k: int, temperature: float, seed: int) -> dict[str, float]:
    """The four numbers from scikit-learn alone: standardised logistic regression and a cosine kNN voting exp(-d/τ)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed))
    knn = KNeighborsClassifier(k, metric="cosine", weights=lambda d: np.exp(-d / temperature), algorithm="brute")
    scores = {}
    for name, estimator in (("linear_probe", probe), ("knn", knn)):
        predicted = estimator.fit(train_z, train_y).predict(test_z)
        scores[f"{name}_accuracy"] = accuracy_score(test_y, predicted)
        scores[f"{name}_macro_f1"] = f1_score(test_y, predicted, average="macro")
    return scores


def test_probe_scores_match_scikit_learn_on_the_same_embeddings(gen: torch.Generator) -> None:
    from hf_contrast.metrics import PROBE_METRICS, knn_predict, linear_probe_predict, probe_scores

    centres = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    klass = torch.tensor([0] * 100 + [1] * 70 + [2] * 45 + [3] * 25)[torch.randperm(240, generator=gen)]  # skewed
    labels = torch.tensor([3, 5, 7, 9])[klass]
    z = centres[klass] + 1.3 * torch.randn(240, 8, generator=gen, dtype=torch.float64)
    z[:, 0] = 4.0 * z[:, 0] - 2.0  # badly scaled feature: the probe standardises
    tr, te = slice(0, 160), slice(160, 240)
    ours = probe_scores(z[tr], labels[tr], z[te], labels[te], knn_k=9, knn_temperature=0.1, seed=3)
    reference = _sklearn_probe_scores(z[tr].numpy(), labels[tr].numpy(), z[te].numpy(), labels[te].numpy(), 9, 0.1, 3)
    assert tuple(ours) == PROBE_METRICS
    assert ours == pytest.approx(reference, abs=1e-12)
    assert all(0.3 < value < 1.0 for value in ours.values())  # not trivially separable
    assert ours["knn_macro_f1"] != pytest.approx(ours["knn_accuracy"])  # skewed classes: two different numbers
    assert ours["knn_accuracy"] == knn_accuracy(z[tr], labels[tr], z[te], labels[te], k=9, temperature=0.1)
    assert ours["linear_probe_accuracy"] == linear_probe_accuracy(z[tr], labels[tr], z[te], labels[te], seed=3)
    assert set(knn_predict(z[tr], labels[tr], z[te], k=9).tolist()) <= {3, 5, 7, 9}  # the original label values
    assert linear_probe_predict(z[tr].numpy(), labels[tr].numpy(), z[te].numpy()).shape == (80,)  # numpy in


def test_knn_predict_leave_one_out_never_votes_for_itself() -> None:
    from hf_contrast.metrics import knn_predict

    z = torch.tensor([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.1, 0.99]])
    assert knn_predict(z, torch.tensor([0, 1, 2, 2]), k=1).tolist() == [1, 0, 2, 2]


def test_probe_scores_warn_on_a_small_fit_split_and_reject_bad_input() -> None:
    from hf_contrast.metrics import probe_scores

    z, y = torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 0, 1])
    with pytest.warns(UserWarning, match="knn_k=20 exceeds the 6 training rows; using k=6"):
        out = probe_scores(z, y, z, y)
    assert out["knn_accuracy"] == knn_accuracy(z, y, z, y, k=6)
    with pytest.raises(ValueError, match="`train_y` must contain at least two classes"):
        probe_scores(z, torch.zeros(6, dtype=torch.long), z, y, knn_k=2)
    with pytest.raises(ValueError, match=r"`test_y` must have shape \(6,\)"):
        probe_scores(z, y, z, y[:5], knn_k=2)
    with pytest.raises(ValueError, match="`knn_k` must be an integer >= 1"):
        probe_scores(z, y, z, y, knn_k=0)
