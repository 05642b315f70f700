"""How every launched test worker ends: :func:`finish_process`.

Imported by the scripts in this directory and by the tests' inline workers (``_launch.launch_env`` puts this
directory on their ``PYTHONPATH``). It imports nothing from hf_contrast, so that a worker that needs only
``torch.distributed`` stays light.
"""

from __future__ import annotations

import logging
import os
import sys

import torch.distributed as dist

__all__ = ["finish_process"]


def finish_process() -> None:
    """End a launched worker once its results are written: every rank waits for the others (so that none leaves
    while another still needs it), then flushes its output and leaves with ``os._exit(0)``, skipping the process
    group's close and interpreter shutdown.

    Why not ``destroy_process_group()`` and a plain return: closing a gloo group can deadlock, and its threads,
    freed at shutdown, can abort a rank, each after every result was written:

    - torch 2.6 (the lowest environment): the close holds the GIL while it joins gloo's worker thread, and that
      thread, still freeing the last collective's tensors (or a barrier's, which holds the collectives before it),
      waits for the GIL. Measured: the uniformity worker of ``tests/losses/test_align_uniform.py`` hung in about
      one launch in fifteen, with or without a barrier before the close (both stacks read with py-spy).
    - torch 2.14: a group that DDP or FSDP wrapped a model with stays alive after ``destroy_process_group()``,
      and its threads, freed during interpreter shutdown, can abort a rank (SIGABRT, "terminate called without an
      active exception"; pytorch/pytorch#179291, #190489) about one launch in a few hundred.

    The tests check the results the ranks wrote, not torch's shutdown.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
