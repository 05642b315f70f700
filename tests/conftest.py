"""Test-suite set-up: nothing may reach the Hugging Face Hub (it is unreachable on CI), and the hypothesis profiles.

The property-based tests (``tests/**/test_properties_*.py``, and every other ``@given``) run under the
hypothesis profile named by ``HYPOTHESIS_PROFILE``: ``ci`` by default (few examples, derandomized so a
run is reproducible, no example database written), ``dev`` for a long local search
(``HYPOTHESIS_PROFILE=dev pytest tests/losses/test_properties_losses.py``; docs/development.md).
"""

from __future__ import annotations

import os

# Set before transformers / huggingface_hub are imported by any test module. The Hub tests
# point HF_ENDPOINT at a loopback stand-in and switch offline mode off explicitly.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
