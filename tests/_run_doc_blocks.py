"""Runs the python code blocks of one documentation page for ``tests/test_docs_blocks.py``.

``python _run_doc_blocks.py SPEC RESULTS HUB_URL``: SPEC is a JSON file ``{"blocks": [...], "work":
folder}``; each block runs with fresh globals (``__name__ == "__main__"``) in its own empty working
directory, its output captured; a block marked ``hub`` runs inside ``use_hub_server(HUB_URL)``.
RESULTS gets ``{line: {"ok", "output", "seconds"}}``, written after every block.

The loopback Hub starts empty but for :data:`STAND_INS`: the Hub models the documentation names, as
tiny random models of the same kind (here a 2-layer BERT in the sentence-transformers layout, with
its tokenizer), so a block that loads ``sentence-transformers/all-MiniLM-L6-v2`` runs as written,
offline and in seconds. Only the code path is real; the numbers are those of a random model.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

STAND_INS = ("sentence-transformers/all-MiniLM-L6-v2",)


def _publish_stand_ins(folder: Path) -> None:
    """Upload a tiny sentence-transformers model under each of :data:`STAND_INS` (inside ``use_hub_server``)."""
    from _tiny import tiny_text_encoder
    from huggingface_hub import HfApi

    from hf_contrast.models import export_sentence_transformers

    api = HfApi()
    for repo_id in STAND_INS:
        local = export_sentence_transformers(tiny_text_encoder(normalize_embeddings=True), folder / repo_id)
        api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(folder_path=local, repo_id=repo_id)


def main() -> None:
    spec_path, results_path, hub_url = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    results: dict[str, dict] = {}
    published = False
    for block in spec["blocks"]:
        folder = Path(spec["work"]) / f"line-{block['line']}"
        folder.mkdir(parents=True, exist_ok=True)
        os.chdir(folder)
        output = io.StringIO()
        start, ok = time.perf_counter(), True
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.redirect_stdout(output))
            stack.enter_context(contextlib.redirect_stderr(output))
            try:
                if block["marker"] == "hub":
                    from hub_server import use_hub_server

                    refused = stack.enter_context(use_hub_server(hub_url, cache_dir=folder / "hub-cache"))
                    if not published:
                        _publish_stand_ins(Path(spec["work"]) / "stand-ins")
                        published = True
                else:
                    refused = []
                code = compile(block["code"], f"{block['page']}:{block['line']}", "exec")
                exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 - the block under test
                if refused:
                    raise RuntimeError(f"the block reached hosts other than the loopback Hub: {refused}")
            except BaseException:  # noqa: BLE001 - a block's failure of any kind is its result
                ok = False
                traceback.print_exc(file=output)
        results[str(block["line"])] = {
            "ok": ok,
            "output": output.getvalue()[-4000:],
            "seconds": time.perf_counter() - start,
        }
        results_path.write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    main()
