"""CUDA graphs of the device views (hf_contrast.views.cuda_graphs): the same values as eager, captured once per shape.

All but the calls that must run eagerly need a GPU (skipped on CI's CPUs; benchmarks/gpu_step_speed.sh runs them on
one). The pass a graph replays is compared with the eager views on the CPU in tests/views/test_device_views.py.
"""

from __future__ import annotations

import logging

import pytest
import torch

from hf_contrast.views.batched_simclr import BatchedSimCLRViews
from hf_contrast.views.cuda_graphs import CUDAGraphs

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")

MEAN, STD = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)


def _images(batch: int, size: int = 32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=g).cuda()


@needs_gpu
def test_graphed_views_equal_the_eager_views_on_the_gpu(caplog):
    """Per-sample, chunk-shared and several views in one call, two batch sizes, under a bf16 autocast: the views
    replayed from graphs equal the views launched op by op (``cuda_graphs=False``); one graph per shape."""
    graphed = BatchedSimCLRViews(24, MEAN, STD, seed=0, blur_p=0.5, solarize_p=0.2)
    eager = BatchedSimCLRViews(24, MEAN, STD, seed=0, blur_p=0.5, solarize_p=0.2, cuda_graphs=False)
    with caplog.at_level(logging.INFO, logger="hf_contrast.views.cuda_graphs"):
        for batch in (16, 8, 16):
            x = _images(batch, seed=batch)
            for chunks in ([None, None], [4, 4, None, None]):
                for step in range(2):  # a replay with new parameters, not the captured ones
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        got = graphed.many(x, graphed.generator(step), chunks)
                        want = eager.many(x, eager.generator(step), chunks)
                    for a, b in zip(got, want):
                        assert a.dtype == torch.float32
                        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
            assert not torch.equal(got[0], got[1])
    assert len(graphed._graphs) == 4  # (16 or 8 rows) x (2 or 4 views)
    assert sum("replayed from a CUDA graph" in r.getMessage() for r in caplog.records) == 1
    assert "cuda_graphs=False" in repr(eager) and "cuda_graphs" not in repr(graphed)


@needs_gpu
def test_a_returned_view_survives_the_next_replay():
    views = BatchedSimCLRViews(16, MEAN, STD, seed=0)
    x = _images(8)
    first = views(x, views.generator(0))
    kept = first.clone()
    views(x, views.generator(1))
    assert torch.equal(first, kept)


@needs_gpu
def test_large_views_and_extra_shapes_run_eagerly():
    views = BatchedSimCLRViews(512, MEAN, STD, seed=0)  # 64 rows of 512 px: 192 MiB of float32, over the bound
    views(_images(64, size=512), views.generator(0))
    assert len(views._graphs) == 0
    graphs = CUDAGraphs("test", max_graphs=1)
    x = torch.arange(6.0, device="cuda")
    assert torch.equal(graphs("a", lambda t: t * 2, x), x * 2)
    assert torch.equal(graphs("b", lambda t: t * 3, x), x * 3)  # over max_graphs: eager
    assert torch.equal(graphs("a", lambda t: t * 2, x + 1), (x + 1) * 2)  # replayed with the new input
    assert len(graphs) == 1


@needs_gpu
def test_a_pass_that_cannot_be_captured_runs_eagerly_with_one_warning(caplog):
    graphs = CUDAGraphs("test")
    x = torch.arange(6.0, device="cuda")

    def reads_the_host(t: torch.Tensor) -> torch.Tensor:
        return t * float(t.sum())  # a host read: not capturable

    with caplog.at_level(logging.WARNING, logger="hf_contrast.views.cuda_graphs"):
        assert torch.equal(graphs("a", reads_the_host, x), x * 15.0)
        assert torch.equal(graphs("b", reads_the_host, x), x * 15.0)
    assert len(graphs) == 0
    assert sum("could not be captured" in r.getMessage() for r in caplog.records) == 1
    assert torch.equal(x * 2, torch.arange(0.0, 12.0, 2.0, device="cuda"))  # the device still works


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
def test_calls_a_replay_would_get_wrong_run_eagerly(device):
    """An input that requires grad keeps its autograd graph (a replay records none), and a call under
    ``torch.inference_mode`` makes no graph whose buffers a later call outside it could not fill: both run ``fn``
    eagerly, capture nothing, and a later ordinary call on the GPU is captured and replayed as usual."""
    graphs = CUDAGraphs("test")
    x = torch.arange(4.0, device=device, requires_grad=True)
    out = graphs("a", lambda t: t * 2, x)
    out.sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))
    with torch.inference_mode():
        assert torch.equal(graphs("a", lambda t: t * 2, x.detach()), x.detach() * 2)
    assert len(graphs) == 0
    if device == "cuda":
        assert torch.equal(graphs("a", lambda t: t * 3, x.detach()), x.detach() * 3)
        assert len(graphs) == 1
