"""Every complete Python code block of README.md and of the documentation (docs/**/*.md) runs as written,
on its own (issue 17).

Convention (docs "Development"): a fenced block tagged ``python`` is complete. Each one runs with fresh
globals in its own empty working directory, offline, on CPU, so a block that leans on an earlier block's
imports, variables or files fails. The blocks of one page run in one interpreter, one after the other (one
start-up per page, not per block); one test per block, named by its page and the heading above it; a
failure shows the block and the end of its output.

Two markers, an HTML comment on the line right above the fence, invisible on the site:

- ``<!-- docs-test: hub -->``: the block talks to the Hub; it runs against the loopback stand-in
  (``tests/hub_server.py``: a fresh one per page, any non-loopback host refused).
- ``<!-- docs-test: skip <reason> -->``: the block is not run (it needs a GPU, a multi-process launch or
  data the tests cannot have). The reason is required and such blocks must stay rare
  (``MAX_SKIPPED``); prefer a tiny runnable form.

Other tags (``bash``, ``text``, ``yaml``…) are not run; ``py`` (the former "fragment" tag) is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import pytest
from hub_server import run_hub_server

ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).resolve().parent / "_run_doc_blocks.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LANGUAGES = {"python", "bash", "text", "yaml", "toml", "json", "console", "markdown", ""}
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<kind>hub|skip)\b\s*(?P<reason>.*?)\s*-->\s*$")
MAX_SKIPPED = 4
# (page, heading) -> why a block does not run yet, because of code owned elsewhere (strict xfail: the test
# fails as soon as the block runs, so the entry must then be removed)
KNOWN_BROKEN: dict[tuple[str, str], str] = {}
PAGE_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository root
    heading: str
    language: str
    line: int  # 1-based line of the opening fence
    code: str
    marker: str = ""  # "", "hub" or "skip"
    reason: str = ""


FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,})(?P<info>[^`]*)$")


def page_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order, with the heading above each and its marker."""
    return parse_blocks(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


def parse_blocks(text: str, page: str) -> list[Block]:
    """The fenced code blocks of Markdown ``text``, as CommonMark reads fences: a block closes at a line of
    at least as many backticks as opened it, alone, so a block shown inside a longer fence (a ````markdown
    example of a model card) is part of that outer block's text, never a block of its own."""
    blocks: list[Block] = []
    heading, fence, previous = "", None, ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        opening = FENCE.match(line)
        if fence is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif opening:
                marker = MARKER.match(previous)
                fence = (opening["info"].strip(), number, opening["indent"], marker, len(opening["fence"]))
                body: list[str] = []
            if stripped:
                previous = stripped
        elif line.startswith(fence[2]) and set(stripped) == {"`"} and len(stripped) >= fence[4]:
            language, start, _, marker, _ = fence
            blocks.append(
                Block(
                    page,
                    heading,
                    language,
                    start,
                    "\n".join(body) + "\n",
                    marker["kind"] if marker else "",
                    marker["reason"] if marker else "",
                )
            )
            fence, previous = None, ""
        else:
            body.append(line[len(fence[2]) :] if line.startswith(fence[2]) else line)
    if fence is not None:
        raise ValueError(f"{page}: the code block opened at line {fence[1]} is never closed.")
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page)]


def _slug(text: str) -> str:
    words = re.sub(r"`[^`]*`|\([^)]*\)", " ", text).lower()
    return re.sub(r"[^a-z0-9]+", "-", words).strip("-")[:40].rstrip("-") or "block"


def _params() -> list[pytest.param]:
    params, seen = [], {}
    for block in all_blocks():
        if block.language != "python":
            continue
        name = f"{Path(block.page).with_suffix('').as_posix()}:{_slug(block.heading)}"
        seen[name] = seen.get(name, 0) + 1
        marks = [pytest.mark.skip(reason=block.reason)] if block.marker == "skip" else []
        if (block.page, block.heading) in KNOWN_BROKEN:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BROKEN[block.page, block.heading]))
        params.append(pytest.param(block, id=name if seen[name] == 1 else f"{name}-{seen[name]}", marks=marks))
    return params


def test_blocks_are_tagged_and_markers_are_explicit():
    blocks = all_blocks()
    assert any(b.language == "python" and b.page == "README.md" for b in blocks), "README.md has no python block"
    for block in blocks:
        where = f"{block.page} line {block.line}"
        assert block.language in LANGUAGES, (
            f"{where}: unknown code block tag {block.language!r} "
            "(a python block that must not run takes `<!-- docs-test: skip <reason> -->`)"
        )
        if block.marker:
            assert block.language == "python", f"{where}: a docs-test marker on a {block.language!r} block"
        if block.marker == "skip":
            assert block.reason, f"{where}: `docs-test: skip` needs a reason"
    for page, heading in KNOWN_BROKEN:
        assert any(b.page == page and b.heading == heading and b.language == "python" for b in blocks), (
            f"KNOWN_BROKEN names {page}: {heading!r}, which has no python block any more: update the list"
        )
    skipped = [f"{b.page}:{b.line}" for b in blocks if b.marker == "skip"]
    assert len(skipped) <= MAX_SKIPPED, f"too many python blocks that do not run: {skipped}"


def test_a_marker_needs_a_block_below_it():
    """A marker that is not right above a python fence would silently do nothing."""
    for path in PAGES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if MARKER.match(line.strip()):
                following = next((l for l in lines[number:] if l.strip()), "")
                assert following.strip().startswith("```python"), (
                    f"{path.relative_to(ROOT)} line {number}: marker without a python block below"
                )


def test_blocks_shown_inside_a_longer_fence_are_not_extracted():
    """A generated model card shown in a ````markdown fence holds python blocks that are text, not code to run."""
    page = "\n".join(
        [
            "# Cards",
            "````markdown",
            "# simclr encoder",
            "```python",
            "raise SystemExit('a block inside the example card must not run')",
            "```",
            "```",
            "ContrastiveEncoder(...)",
            "```",
            "````",
            "## After",
            "<!-- docs-test: hub -->",
            "```python",
            "print('runs')",
            "```",
            "  ```bash",
            "  echo indented",
            "  ```",
        ]
    )
    blocks = parse_blocks(page, "page.md")
    assert [(b.language, b.line, b.heading, b.marker) for b in blocks] == [
        ("markdown", 2, "Cards", ""),
        ("python", 13, "After", "hub"),
        ("bash", 16, "After", ""),
    ]
    assert blocks[0].code.splitlines()[2] == "raise SystemExit('a block inside the example card must not run')"
    assert blocks[1].code == "print('runs')\n" and blocks[2].code == "echo indented\n"
    with pytest.raises(ValueError, match="line 1 is never closed"):
        parse_blocks("````markdown\n```python\nx = 1\n```\n", "open.md")


@cache
def _run_page(page: str, tmp_root: str) -> dict[str, dict]:
    """Run every (not skipped) python block of ``page`` in one interpreter; results by block line."""
    blocks = [b for b in page_blocks(ROOT / page) if b.language == "python" and b.marker != "skip"]
    work = Path(tmp_root) / _slug(page)
    work.mkdir(parents=True, exist_ok=True)
    spec, results = work / "blocks.json", work / "results.json"
    spec.write_text(json.dumps({"blocks": [asdict(b) for b in blocks], "work": str(work)}), encoding="utf-8")
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        TQDM_DISABLE="1",
        PYTHONWARNINGS="ignore::DeprecationWarning",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(RUNNER.parent), env.get("PYTHONPATH", "")]),
    )
    env.setdefault("OMP_NUM_THREADS", "1")

    def run(hub_url: str) -> str:
        try:
            process = subprocess.run(
                [sys.executable, str(RUNNER), str(spec), str(results), hub_url],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=PAGE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            return f"the page's blocks ran over {PAGE_TIMEOUT_S} s (this block had not finished)\n{error.stdout or ''}"
        return f"the block runner died (exit {process.returncode})\n{(process.stdout + process.stderr)[-4000:]}"

    if any(b.marker == "hub" for b in blocks):
        with run_hub_server(work / "hub") as url:
            failure = run(url)
    else:
        failure = run("")
    done = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}
    # a block the runner never finished (a time-out, a crash of the interpreter) fails with the reason
    outcome = {str(b.line): done.get(str(b.line), {"ok": False, "output": failure[-4000:]}) for b in blocks}
    if all(result["ok"] for result in outcome.values()):
        # what the blocks wrote (full-size checkpoints: 2.7 GB over all pages) goes once the page has passed,
        # so the suite's disk use stays bounded; a failed page keeps its files to be looked at
        for entry in work.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            elif entry not in (spec, results):
                entry.unlink(missing_ok=True)
    return outcome


@pytest.mark.parametrize("block", _params())
def test_doc_block_runs(block: Block, tmp_path_factory: pytest.TempPathFactory):
    results = _run_page(block.page, str(tmp_path_factory.getbasetemp() / "doc-blocks"))
    result = results[str(block.line)]
    if not result["ok"]:
        pytest.fail(
            f"{block.page} line {block.line} ({block.heading}) failed:\n--- block ---\n{block.code}"
            f"--- output (end) ---\n{result['output']}",
            pytrace=False,
        )
