"""Test-suite set-up: nothing may reach the Hugging Face Hub (it is unreachable on CI), and the hypothesis profiles.

The property-based tests (``tests/**/test_properties_*.py``, and every other ``@given``) run under the
hypothesis profile named by ``HYPOTHESIS_PROFILE``: ``ci`` by default (few examples, derandomized so a
run is reproducible, no example database written), ``dev`` for a long local search
(``HYPOTHESIS_PROFILE=dev pytest tests/losses/test_properties_losses.py``; docs/development.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

# Set before transformers / huggingface_hub are imported by any test module. The Hub tests
# point HF_ENDPOINT at a loopback stand-in and switch offline mode off explicitly.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
from hypothesis import HealthCheck, Phase, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
# CI: bounded (the whole property suite stays well under two minutes on two CPU cores), reproducible
# (derandomize: the same examples every run, so a red CI run is red again locally), and no
# `.hypothesis/` folder written into the checkout; print_blob lets a failure be replayed exactly. No
# shrinking and the first failure only: a strict xfail (a known finding) then costs one failing example,
# not a search for the smallest one (the `dev` profile shrinks).
settings.register_profile(
    "ci",
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=_SLOW_OK,
)
# Local search for new findings: many more random examples (examples found are kept in `.hypothesis/`, git-ignored).
settings.register_profile("dev", max_examples=500, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ---- shared tiny fixtures -------------------------------------------------------------------------------------------
# Built once per session and shared by every test file that does not define its own of the same name. The encoders are
# read-only: each is checked at the end of the session to be in eval mode with the weights it was built with, so a test
# that changes one fails loudly (copy it first: ``copy.deepcopy(timm_encoder)``).


def _read_only(encoder: Any) -> Iterator[Any]:
    import torch

    built = {name: tensor.clone() for name, tensor in encoder.state_dict().items()}
    yield encoder
    changed = [name for name, tensor in encoder.state_dict().items() if not torch.equal(tensor, built[name])]
    assert not encoder.training and not changed and set(built) == set(encoder.state_dict()), (
        f"a test changed the shared {type(encoder).__name__} (training={encoder.training}, changed {changed[:3]}): "
        "tests that change an encoder copy it first (copy.deepcopy)"
    )


@pytest.fixture(scope="session")
def timm_encoder() -> Iterator[Any]:
    """A tiny timm ``ContrastiveEncoder`` (``_tiny.tiny_timm_encoder``, seed 0) in eval mode; read-only."""
    import torch
    from _tiny import tiny_timm_encoder

    torch.manual_seed(0)
    yield from _read_only(tiny_timm_encoder().eval())


@pytest.fixture(scope="session")
def text_encoder() -> Iterator[Any]:
    """A tiny BERT ``ContrastiveEncoder`` with its tokenizer (``_tiny.tiny_text_encoder``, seed 0) in eval mode;
    read-only."""
    import torch
    from _tiny import tiny_text_encoder

    torch.manual_seed(0)
    yield from _read_only(tiny_text_encoder().eval())


@pytest.fixture(scope="session")
def images() -> Any:
    """16 random 16×16 RGB images labelled ``i % 4`` (a ``datasets.Dataset``: its methods return new datasets, so
    tests share it)."""
    from distributed_scripts.trainer_utils import image_dataset

    return image_dataset(n=16, size=16)
