"""``check_distributed_engine``: a multi-process launch that Accelerate runs as lone processes is refused; a
requested FSDP / DeepSpeed that Accelerate did not start (CPU processes) is said once."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from hf_contrast.errors import InputError
from hf_contrast.training.checks import check_distributed_engine, requested_engine


def _args(**kwargs):
    return SimpleNamespace(
        use_cpu=kwargs.pop("use_cpu", False), device=torch.device("cpu"), fsdp=None, deepspeed=None, **kwargs
    )


def test_several_launched_processes_without_a_process_group_are_refused(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(InputError, match=r"WORLD_SIZE=2.*use_cpu=False.*pass `use_cpu=True`"):
        check_distributed_engine(_args(), SimpleNamespace(num_processes=1, distributed_type="NO"), False, False)
    check_distributed_engine(_args(), SimpleNamespace(num_processes=2, distributed_type="MULTI_CPU"), False, False)


@pytest.mark.parametrize(
    ("env", "args", "engine"),
    [
        ("ACCELERATE_USE_FSDP", {}, "FSDP"),
        ("ACCELERATE_USE_DEEPSPEED", {}, "DeepSpeed"),
        (None, {"fsdp": True}, "FSDP"),
    ],
)
def test_a_requested_engine_that_did_not_start_is_said(monkeypatch, caplog, env, args, engine) -> None:
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    if env:
        monkeypatch.setenv(env, "true")
    training_args = SimpleNamespace(**{**vars(_args()), **args})
    assert requested_engine(training_args) == engine
    accelerator = SimpleNamespace(num_processes=2, distributed_type="MULTI_CPU", is_main_process=True)
    logger = logging.getLogger("hf_contrast.training.checks")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="hf_contrast.training.checks"):
            check_distributed_engine(training_args, accelerator, False, False)
            assert f"{engine} was requested, but Accelerate runs MULTI_CPU" in caplog.text
            caplog.clear()
            check_distributed_engine(training_args, accelerator, engine == "FSDP", engine == "DeepSpeed")  # started
            assert caplog.text == ""
            other_rank = SimpleNamespace(num_processes=2, distributed_type="MULTI_CPU", is_main_process=False)
            check_distributed_engine(training_args, other_rank, False, False)
            assert caplog.text == ""  # said once, by the main process
    finally:
        logger.removeHandler(caplog.handler)


def test_no_engine_is_requested_by_default(monkeypatch) -> None:
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert requested_engine(_args()) is None
