"""One evaluation path: no example or benchmark fits a probe or a kNN classifier itself.

The scripts in ``examples/`` and ``benchmarks/`` score frozen features through the library
(:class:`hf_contrast.evaluation.ProbeEvaluator`, :func:`hf_contrast.metrics.probe_scores`, the trainer's
evaluation), so that one number has one definition and one name. This test reads their syntax trees:
no scikit-learn import, and no use of the probe building blocks that fit or score a probe by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("examples/*.py"), *ROOT.glob("benchmarks/*.py")])

#: Names that fit or score a probe / kNN by hand (scikit-learn estimators, the metric building blocks).
FORBIDDEN = {
    "LogisticRegression",
    "KNeighborsClassifier",
    "NearestNeighbors",
    "SGDClassifier",
    "LinearSVC",
    "linear_probe_accuracy",
    "linear_probe_predict",
    "knn_accuracy",
    "knn_predict",
    "f1_score",
    "accuracy_score",
}


def hand_made_probes(source: str) -> list[str]:
    """``"line: what"`` for every scikit-learn import and every use of a :data:`FORBIDDEN` name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "sklearn"]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] == "sklearn":
                found.append(f"{node.lineno}: from {node.module} import ...")
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in FORBIDDEN]
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_the_check_finds_hand_made_probes() -> None:
    source = (
        "import sklearn.neighbors\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "from hf_contrast.metrics import knn_accuracy\n"
        "import hf_contrast.metrics as m\n"
        "m.linear_probe_accuracy(a, b, c, d)\n"
    )
    assert hand_made_probes(source) == [
        "1: import sklearn.neighbors",
        "2: from sklearn.linear_model import ...",
        "2: import LogisticRegression",
        "3: import knn_accuracy",
        "5: .linear_probe_accuracy",
    ]
    assert hand_made_probes("from hf_contrast.evaluation import ProbeEvaluator\nProbeEvaluator(a, b)(m)\n") == []


def test_the_scripts_are_found() -> None:
    names = {path.name for path in SCRIPTS}
    assert {"run_care.py", "run_simo.py", "run_ocl.py", "run_local.py", "run_bert.py", "run_linear_probe.py",
            "real_data.py", "bench_quality.py"} <= names  # fmt: skip


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_example_or_benchmark_fits_a_probe_itself(path: Path) -> None:
    found = hand_made_probes(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.relative_to(ROOT)} fits or scores a probe by hand ({found}): use "
        "hf_contrast.evaluation.ProbeEvaluator (or hf_contrast.metrics.probe_scores on features you already have)."
    )
