"""Every complete Python snippet of README.md runs as written (issue 10).

Convention (README "Development"): a code block tagged ``python`` is complete and is run here, each
in a fresh interpreter (a subprocess, offline, on CPU, in a temporary working directory), one test
per block named by the heading above it; a failure shows the block's text and the end of its output.
A block tagged ``py`` is a fragment that needs context the tests cannot have, and is not run. The
fragments are few and listed here (``test_fragments_are_the_listed_few`` fails on any other):

- "Encoders: timm and Hugging Face text backbones" — a text encoder from a Hub id (downloads BERT).
- "Views" — CARE's chunked text views need a text encoder's tokenizer (a Hub download).
- "Data users bring" — loaders for the user's own image folder, TSV and SICK files.
- "Publishing to the Hub" (2 blocks) — a push to the Hub, and loading the pushed repository back
  with hf_contrast, timm and sentence-transformers.

The Training block trains CARE on the embedded digits with batch 256 and ``n_splits=8``: the
epoch's last batch has 1438 % 256 = 158 rows, the case that used to crash at the end of epoch 1
(``test_training_snippet_has_a_ragged_last_batch`` keeps the snippet that way); it is not marked
slow, so the default suite guards that case. A block slower than 60 s on the project's 2-core machine
may be marked ``slow`` in ``SLOW``, with the time measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# heading -> number of ``py`` fragments under it (see the module docstring for why each is not run)
FRAGMENTS = {
    "Encoders: timm and Hugging Face text backbones": 1,
    "Views (`hf_contrast.views`)": 1,
    "Data users bring (`hf_contrast.data`)": 1,
    "Publishing to the Hub": 2,
}
# heading -> why the block is marked slow (wall time measured on the shared 2-core machine)
# (none: the slowest, Training, took 48 s in the suite and 68 s beside a load average of 11)
SLOW: dict[str, str] = {}
# heading -> reason: blocks in README sections owned by someone else that do not run yet (strict xfail:
# the test fails as soon as the block runs, so the entry must then be removed)
KNOWN_BROKEN: dict[str, str] = {}
TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    heading: str
    language: str
    line: int  # 1-based line of the opening fence
    code: str


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order, with the heading above each."""
    blocks, heading, fence = [], "", None
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif line.startswith("```"):
                fence, body = (line[3:].strip(), number), []
        elif line.startswith("```"):
            blocks.append(Block(heading, fence[0], fence[1], "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        raise ValueError(
            f"README.md: the code block opened at line {fence[1]} is never closed."
        )
    return blocks


def _slug(heading: str) -> str:
    """A test id: the heading without its code spans and parentheses ("Views (`hf_contrast.views`)" -> views)."""
    words = re.sub(r"`[^`]*`|\([^)]*\)", " ", heading).lower()
    return re.sub(r"[^a-z0-9]+", "-", words).strip("-")[:48].rstrip("-") or "block"


def _complete_blocks() -> list[pytest.param]:
    blocks = [
        b
        for b in readme_blocks(README.read_text(encoding="utf-8"))
        if b.language == "python"
    ]
    params, seen = [], {}
    for block in blocks:
        slug = _slug(block.heading)
        seen[slug] = seen.get(slug, 0) + 1
        marks = []
        if block.heading in SLOW:
            marks.append(pytest.mark.slow)
        if block.heading in KNOWN_BROKEN:
            marks.append(
                pytest.mark.xfail(strict=True, reason=KNOWN_BROKEN[block.heading])
            )
        params.append(
            pytest.param(
                block,
                id=slug if seen[slug] == 1 else f"{slug}-{seen[slug]}",
                marks=marks,
            )
        )
    return params


def test_readme_blocks_parse_and_are_tagged():
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    python = [b for b in blocks if b.language == "python"]
    assert len(python) >= 10, (
        f"expected the README's complete snippets, found {len(python)} `python` blocks"
    )
    assert {b.language for b in blocks} <= {"python", "py", "bash", ""}, sorted(
        {b.language for b in blocks}
    )
    for name in (*SLOW, *KNOWN_BROKEN):
        assert any(b.heading == name for b in python), (
            f"{name!r} has no `python` block any more: update the list"
        )


def test_fragments_are_the_listed_few():
    """Every ``py`` (not run) block is one of FRAGMENTS; a new fragment must be listed, with its reason."""
    counts: dict[str, int] = {}
    for block in readme_blocks(README.read_text(encoding="utf-8")):
        if block.language == "py":
            counts[block.heading] = counts.get(block.heading, 0) + 1
    assert counts == FRAGMENTS


def test_training_snippet_has_a_ragged_last_batch():
    """The Training block must keep exercising a ragged last batch of a chunked method (issue 10)."""
    from hf_contrast.data import load_digits_dataset

    (training,) = [
        b
        for b in readme_blocks(README.read_text(encoding="utf-8"))
        if b.language == "python" and b.heading.startswith("Training (")
    ]
    for needle in (
        "CARETrainer",
        "load_digits_dataset(image_size=32)",
        "per_device_train_batch_size=256",
        "n_splits=8",
    ):
        assert needle in training.code, needle
    assert (
        "max_steps" not in training.code
    )  # an epoch must end, so its last batch is reached
    assert len(load_digits_dataset(image_size=32)["train"]) % 256 == 158


@pytest.mark.parametrize("block", _complete_blocks())
def test_readme_snippet_runs(block: Block, tmp_path: Path):
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    script = tmp_path / "snippet.py"
    script.write_text(block.code, encoding="utf-8")
    try:
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"README.md line {block.line} ({block.heading}) ran over {TIMEOUT_S} s:\n{block.code}"
        )
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        pytest.fail(
            f"README.md line {block.line} ({block.heading}) failed (exit {result.returncode}).\n"
            f"--- block ---\n{block.code}--- output (end) ---\n{output}",
            pytrace=False,
        )
