"""Helpers for tests that launch real processes (torchrun / accelerate launch) on this machine."""

from __future__ import annotations

import importlib.util
import inspect
import os
import socket
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["free_port", "launch_env", "load_script", "trainer_resumes_across_processes_on_cpu"]

DISTRIBUTED_SCRIPTS = Path(__file__).parent / "distributed_scripts"


def free_port() -> int:
    """A TCP port that is free on loopback now (bind to port 0): a fixed port collides between runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_env(*paths: str | Path) -> dict[str, str]:
    """The environment for a launched worker: this one, one BLAS thread per process (two processes share this
    machine's cores), no tokenizer threads, and ``paths`` then ``tests/distributed_scripts`` first on
    ``PYTHONPATH`` (an inline worker written to a temporary folder can end with
    ``from process_end import finish_process``)."""
    path = os.pathsep.join(
        p for p in (*map(str, paths), str(DISTRIBUTED_SCRIPTS), os.environ.get("PYTHONPATH", "")) if p
    )
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path}


def load_script(name: str, path: str | Path) -> ModuleType:
    """Import a script by path (a worker's single-process reference computation, an example's functions). It is
    registered in ``sys.modules`` under ``name`` before it runs, as Python's import recipe does, so that the
    dataclasses it defines resolve their module."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def trainer_resumes_across_processes_on_cpu() -> bool:
    """transformers 5.0's Trainer loads ``optimizer.pt`` onto ``args.device`` when ``world_size > 1``, which is
    ``cpu:0`` for CPU processes, a location torch cannot restore (``don't know how to restore data location``);
    later releases load onto the CPU. GPU processes are not affected."""
    from transformers import Trainer

    return "map_location = self.args.device if self.args.world_size > 1 else" not in inspect.getsource(
        Trainer._load_optimizer_and_scheduler
    )
