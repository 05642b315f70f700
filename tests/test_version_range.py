"""The declared version range: constraints/lowest.txt pins exactly the lower bounds pyproject.toml
declares, and the package imports without the optional ``datasets``/``evaluate`` stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _declared_lower_bounds() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bounds: dict[str, str] = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        requirement = Requirement(line)
        # a `>=` lower bound, or an exact `==` pin (a tool whose output must not drift, as ruff's formatting)
        lower = [spec.version for spec in requirement.specifier if spec.operator in (">=", "==")]
        assert len(lower) == 1, f"{line!r} in pyproject.toml needs exactly one `>=` lower bound (or one `==` pin)"
        bounds[canonicalize_name(requirement.name)] = lower[0]
    return bounds


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "constraints" / "lowest.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            pins[canonicalize_name(requirement.name)] = exact[0] if exact else str(requirement.specifier)
    return pins


def test_lowest_constraints_pin_every_declared_lower_bound() -> None:
    bounds, pins = _declared_lower_bounds(), _pins()
    mismatched = {
        name: (bound, pins.get(name))
        for name, bound in bounds.items()
        if name not in pins or pins[name].startswith(("<", ">", "!", "~")) or Version(pins[name]) != Version(bound)
    }
    assert not mismatched, f"pyproject bound vs constraints/lowest.txt pin: {mismatched}"


def test_package_and_trainer_import_without_datasets() -> None:
    # a GPU image without `datasets` (nor `evaluate`, which needs it) must import the package, every
    # subpackage and the trainers; only the functions that load data sets need it
    script = """
import importlib.abc, sys

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("datasets", "evaluate"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
import importlib.util
HIDDEN = ("datasets", "evaluate")
importlib.util.find_spec = (
    lambda find: lambda name, package=None: None if name.split(".")[0] in HIDDEN else find(name, package)
)(importlib.util.find_spec)
import pkgutil, hf_contrast
for module in pkgutil.walk_packages(hf_contrast.__path__, "hf_contrast."):
    if module.name.endswith("evaluate_modules"):  # the `evaluate` modules themselves
        continue
    importlib.import_module(module.name)
from hf_contrast.training import ContrastiveTrainer, ContrastiveTrainingArguments
assert "datasets" not in sys.modules and "evaluate" not in sys.modules, sorted(
    m for m in sys.modules if m.startswith(("datasets", "evaluate"))
)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
