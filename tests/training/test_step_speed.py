"""A training step at the speed of the device (issue 28): the decoded-image cache, every view of a batch in one pass,
the non-finite check as one reduction, one host transfer per logging step and none in between, the
``views_on_device`` default, and ``torch_compile`` with the image objectives.

The timings themselves are measured by ``benchmarks/bench_step_overhead.py``, never here.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import numpy as np
import pytest
import torch
from _images import png_bytes
from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback

from hf_contrast.objectives import CAREObjective, LOCALObjective, SimCLRObjective, get_objective
from hf_contrast.training import ContrastiveTrainer
from hf_contrast.training.callbacks import LossTermTracker, NonFinitePolicy, all_finite
from hf_contrast.training.run_setup import describe_run
from hf_contrast.training.trainer import plan_image_cache, resolve_views_on_device, serving_options
from hf_contrast.views import BatchedSimCLRViews, DeviceViews
from hf_contrast.views.image_views import ImageViews

sys.path.insert(0, str(Path(__file__).parents[1]))
from _tiny import tiny_text_encoder  # noqa: E402


@pytest.fixture(scope="module")
def images() -> datasets.Dataset:
    return image_dataset(n=48, size=20)


def _trainer(tmp_path: Path, dataset: Any, objective: Any = "simclr", **overrides: Any) -> ContrastiveTrainer:
    options = {"per_device_train_batch_size": 8, "max_steps": 3, "views_on_device": True, "learning_rate": 1e-2}
    args = training_args(tmp_path, **{**options, **overrides})
    return ContrastiveTrainer(model=vit_encoder(), args=args, train_dataset=dataset, objective=objective)


class _Losses(TrainerCallback):
    def __init__(self) -> None:
        self.logged: list[float] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.logged.append(logs["loss"])


# ------------------------------------------------------------------------------ the decoded-image cache


@pytest.mark.parametrize("objective", ["simclr", "care"])
def test_the_cache_trains_exactly_as_the_collator_does(
    tmp_path: Path, images: datasets.Dataset, objective: str
) -> None:
    """Same sampler, same bytes: the losses of a cached run equal those of a run that decodes every batch."""
    make = (lambda: CAREObjective(n_splits=2)) if objective == "care" else (lambda: "simclr")
    runs = {}
    for limit in (4.0, 0.0):  # 0 turns the cache off
        trainer = _trainer(tmp_path / str(limit), images, make(), image_cache_max_gb=limit)
        losses = _Losses()
        trainer.add_callback(losses)
        trainer.train()
        assert (trainer.image_cache is not None) == (limit > 0)
        runs[limit] = losses.logged
    assert len(runs[4.0]) == 3 and runs[4.0] == runs[0.0]


def test_cached_batches_are_the_collators_bytes_gathered_in_one_index_op(tmp_path: Path, images) -> None:
    trainer = _trainer(tmp_path, images)
    trainer.build_image_cache()
    cache = trainer.image_cache
    assert cache is not None and cache.images.dtype == torch.uint8 and cache.images.shape == (48, 3, 16, 16)
    rows = [5, 0, 47, 5]
    from_cache = cache.collate(cache.rows.__getitems__(rows))
    from_collator = trainer.data_collator([images[i] for i in rows])
    assert torch.equal(from_cache["pixel_values_eq"], from_collator["pixel_values_eq"])
    assert torch.equal(from_cache["labels"], from_collator["labels"])
    assert "decoded once into a uint8 cache of 48 images (3×16×16" in describe_run(trainer)["training images"]


def test_the_cache_leaves_an_unreadable_image_out_and_counts_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = [
        {
            "bytes": b"" if i == 3 else png_bytes(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)),
            "path": f"img{i}.png",
        }
        for i in range(17)
    ]
    dataset = datasets.Dataset.from_dict({"image": rows, "label": [i % 2 for i in range(17)]})
    dataset = dataset.cast_column("image", datasets.Image(decode=False))
    trainer = _trainer(tmp_path, dataset, on_bad_image="skip", max_steps=2)
    with pytest.warns(UserWarning, match="1 unreadable training image"):
        metrics = trainer.train().metrics
    assert (
        trainer.image_cache is not None and 3 not in trainer.image_cache.kept and len(trainer.image_cache.kept) == 16
    )
    assert metrics["train_skipped_images"] == 1


@pytest.mark.parametrize("limit", [4.0, 0])
def test_a_cached_training_set_is_decoded_once_at_start_up(tmp_path: Path, images, monkeypatch, limit: float) -> None:
    """The cache's build decodes every training image (and names the bad ones): the start-up scan then reads only
    the evaluation set; without the cache it reads both."""
    from hf_contrast.training import checks as setup_checks

    scanned: list[int] = []
    scan = setup_checks.scan_images
    monkeypatch.setattr(setup_checks, "scan_images", lambda dataset: scanned.append(len(dataset)) or scan(dataset))
    trainer = _trainer(tmp_path / str(limit), images, image_cache_max_gb=limit, max_steps=1)
    trainer.eval_dataset = images.select(range(16))
    trainer.args.eval_strategy = "steps"
    trainer.train()
    assert (trainer.image_cache is not None) == (limit > 0)
    assert scanned == ([16] if limit > 0 else [48, 16])


def test_a_training_set_too_large_for_the_cache_is_decoded_by_persistent_workers(tmp_path: Path, images) -> None:
    trainer = _trainer(tmp_path, images, image_cache_max_gb=1e-9)
    plan = plan_image_cache(trainer.args, trainer.data_collator, images, lambda: (3, 16, 16))
    assert plan.too_large and "above `image_cache_max_gb`=1e-09; raise it" in plan.refusal
    options = serving_options(trainer.args, None, plan)
    assert options["dataloader_persistent_workers"] and options["dataloader_prefetch_factor"] == 4
    assert options["dataloader_num_workers"] >= 1
    assert serving_options(training_args(tmp_path, dataloader_num_workers=3), None, plan) == {}  # the user's choice


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"views_on_device": False}, "made per sample in the DataLoader"),
        ({"image_cache_max_gb": 0}, "turns the decoded-image cache off"),
    ],
)
def test_no_cache_says_why(tmp_path: Path, images, overrides: dict, why: str) -> None:
    trainer = _trainer(tmp_path, images, **overrides)
    trainer.build_image_cache()
    assert trainer.image_cache is None and why in trainer.image_cache_refusal


@pytest.mark.parametrize("value", [-1.0, float("nan"), "4", True])
def test_image_cache_max_gb_is_checked(tmp_path: Path, value: Any) -> None:
    with pytest.raises(
        ValueError, match=r"`image_cache_max_gb` \(`--image_cache_max_gb`\) must be a number of GiB >= 0"
    ):
        training_args(tmp_path, image_cache_max_gb=value)


# ------------------------------------------------------------------------------ views in one pass


@pytest.mark.parametrize(("name", "views_per_row"), [("simclr", 2), ("care", 4)])
def test_every_view_of_a_training_batch_is_made_in_one_pass(tmp_path: Path, images, monkeypatch, name, views_per_row):
    calls: list[int] = []
    apply = BatchedSimCLRViews.apply

    def counted(self: BatchedSimCLRViews, batch: torch.Tensor, params: Any, repeats: int = 1) -> torch.Tensor:
        calls.append(repeats)
        return apply(self, batch, params, repeats)

    monkeypatch.setattr(BatchedSimCLRViews, "apply", counted)
    objective = CAREObjective(n_splits=2) if name == "care" else "simclr"
    _trainer(tmp_path, images, objective, max_steps=2).train()
    assert calls == [views_per_row, views_per_row]  # one call per step, all the batch's views


def test_views_made_together_equal_views_made_one_by_one_and_join_without_a_copy() -> None:
    views = BatchedSimCLRViews(12, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), seed=3)
    images = torch.randint(0, 256, (8, 3, 14, 14), dtype=torch.uint8)
    generator = views.generator(5)
    one_by_one = [views(images, generator, chunk_size=4), views(images, generator, chunk_size=4)]
    one_by_one += [views(images, generator), views(images, generator)]
    device_views = DeviceViews(views)
    device_views.start_batch(5, training=True)
    (eq1, eq2), (v1, v2) = device_views.chunk_shared_and_per_sample(images, n_splits=2, n_views=2)
    for expected, made in zip(one_by_one, [eq1, eq2, v1, v2]):
        torch.testing.assert_close(made, expected, rtol=0, atol=1e-6)
    merged = ImageViews.merge(None, [{"pixel_values": t} for t in (v1, v2, eq1, eq2)])["pixel_values"]
    assert merged.data_ptr() == v1.data_ptr() and torch.equal(merged, torch.cat([v1, v2, eq1, eq2]))
    apart = ImageViews.merge(None, [{"pixel_values": t} for t in (eq1, v1)])["pixel_values"]  # not adjacent: copied
    assert torch.equal(apart, torch.cat([eq1, v1]))


# ------------------------------------------------------------------------------ the non-finite check


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 0 if func.is_view else 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), -float("inf")])
def test_the_gradient_check_is_one_reduction_whatever_the_number_of_tensors(bad: float | None) -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(40)])  # 80 parameter tensors
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    if bad is not None:
        next(iter(model[17].parameters())).grad[1, 2] = bad
    grads = [p.grad for p in model.parameters()]
    with _Ops() as ops:
        finite = all_finite(grads, torch.device("cpu"), fused=True)  # the accelerators' path
    assert bool(finite) == (bad is None)
    assert ops.count <= 10  # the old check: 2-3 kernels per tensor (> 160)
    policy = NonFinitePolicy("raise", loss_terms=None, watched=lambda: (model, torch.nn.Module()))
    assert bool(policy._gradients_finite(torch.device("cpu"))) == (bad is None)  # the CPU's path


def test_a_zero_size_parameter_does_not_stop_the_gradient_check() -> None:
    """A module with a zero-size parameter (its gradient has no element): the order-inf norm has no identity and
    raised at the first step under the default ``nonfinite_policy``; the check now skips it, on both paths."""
    module = torch.nn.Module()
    module.w, module.empty = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.empty(0))
    module.w.grad, module.empty.grad = torch.ones(3), torch.empty(0)
    policy = NonFinitePolicy("raise", loss_terms=None, watched=lambda: (module, torch.nn.Module()))
    assert bool(policy._gradients_finite(torch.device("cpu")))
    assert bool(all_finite([module.w.grad, module.empty.grad], torch.device("cpu"), fused=True))
    module.w.grad[1] = float("nan")
    assert not bool(policy._gradients_finite(torch.device("cpu")))


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=3), min_size=1, max_size=6),
    bad=st.sampled_from([None, float("nan"), float("inf"), -float("inf")]),
    where=st.integers(0, 10**6),
    complex_tensor=st.booleans(),
    magnitude=st.sampled_from([1.0, 1e30, 3e38]),  # finite values whose squares overflow: still finite
)
def test_both_gradient_checks_say_finite_exactly_when_every_element_is(shapes, bad, where, complex_tensor, magnitude):
    g = torch.Generator().manual_seed(where)
    tensors = [magnitude * (2 * torch.rand(shape, generator=g) - 1) for shape in shapes]
    if complex_tensor:
        tensors.append(torch.complex(torch.rand(3, generator=g), torch.rand(3, generator=g)))
    sizes = [t.numel() for t in tensors]
    if bad is not None and sum(sizes):
        k = where % sum(sizes)
        index = next(i for i, _ in enumerate(sizes) if sum(sizes[: i + 1]) > k)
        tensors[index].view(-1)[k - sum(sizes[:index])] = bad
    expected = all(bool(torch.isfinite(t).all()) for t in tensors)
    assert bool(all_finite(tensors, torch.device("cpu"), fused=False)) == expected
    assert bool(all_finite(tensors, torch.device("cpu"), fused=True)) == expected


def test_the_gradient_check_lists_the_parameters_once_per_run_and_again_for_a_new_module() -> None:
    """The modules are walked once per ``train()`` call (host time on every step otherwise), and again when the
    Trainer hands over another model (wrapped, replaced): a NaN in the new model's gradients is still seen."""
    models = [torch.nn.Linear(3, 3), torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))]
    current, objective = [models[0]], torch.nn.Module()
    policy = NonFinitePolicy("raise", LossTermTracker(), watched=lambda: (current[0], objective))
    walks = []
    for model in models:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        model.parameters = lambda recurse=True, model=model: walks.append(model) or nn_parameters(model, recurse)
    assert bool(policy._gradients_finite(torch.device("cpu"))) and bool(policy._gradients_finite(torch.device("cpu")))
    assert walks == [models[0]]  # listed once
    current[0] = models[1]
    models[1][1].bias.grad[0] = float("nan")
    assert not bool(policy._gradients_finite(torch.device("cpu")))
    assert walks == [models[0], models[1]]
    policy.on_train_begin(None, type("State", (), {"global_step": 0})(), None)  # a new run lists them again
    policy._gradients_finite(torch.device("cpu"))
    assert walks == [models[0], models[1], models[1]]


def nn_parameters(module: torch.nn.Module, recurse: bool = True):
    return torch.nn.Module.parameters(module, recurse)


# ------------------------------------------------------------------------------ host reads


# Host-side by design, never a device read: the views' random parameters (drawn on the CPU), and the step counters of
# torch's non-fused optimizers (on the CPU unless `capturable`; the default optimizer at the lowest supported bounds)
_HOST_SIDE = ("batched_params.py", "hue_groups", "/torch/optim/")
_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "numpy", "cpu")


def _host_side() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if any(name in frame.f_code.co_filename or name == frame.f_code.co_name for name in _HOST_SIDE):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _counting_reads() -> Iterator[list[str]]:
    reads: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in _READS}

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not _host_side():
                caller = traceback.extract_stack(limit=3)[0]
                reads.append(f"{name} at {Path(caller.filename).name}:{caller.lineno}")
            return method(self, *args, **kwargs)

        return read

    for name, method in saved.items():
        setattr(torch.Tensor, name, wrap(name, method))
    try:
        yield reads
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


class _PerStep(TrainerCallback):
    """What ``scan`` (a context manager yielding a list) records over each step's whole period (next batch, step,
    logging), keyed by the step's number."""

    def __init__(self, scan: Callable[[], contextlib.AbstractContextManager[list[str]]]) -> None:
        self.scan = scan
        self.found: dict[int, list[str]] = {}
        self._stack: contextlib.ExitStack | None = None

    def _close(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._close()
        self._stack = contextlib.ExitStack()
        self.found[state.global_step + 1] = self._stack.enter_context(self.scan())

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._close()


@pytest.mark.parametrize("objective", ["simclr", "care", "supcon"])
def test_no_host_read_outside_logging_steps_and_one_of_ours_per_logging_step(tmp_path, images, objective) -> None:
    make = {"simclr": lambda: "simclr", "care": lambda: CAREObjective(n_splits=2), "supcon": lambda: "supcon"}
    # batches of 4 of 48 rows: no epoch starts within these steps (the sampler's permutation is read on the host)
    trainer = _trainer(
        tmp_path, images, make[objective](), max_steps=6, logging_steps=3, per_device_train_batch_size=4
    )
    counter = _PerStep(_counting_reads)
    trainer.add_callback(counter)
    trainer.train()
    # step 1 is the first (the loader starts, the optimizer is built); steps 3 and 6 log
    for step in (2, 4, 5):
        assert counter.found[step] == [], f"step {step}: {counter.found[step]}"
    # transformers' own reads of its loss and gradient norm (trainer.py) aside: the loss terms and the non-finite
    # flags in one transfer; SupCon's geometry statistics (negative_cos_below_zero) in a second
    ours = [r.split(":")[0] for r in counter.found[3] if not r.split(" at ")[1].startswith("trainer.py")]
    expected = ["tolist at callbacks.py"] + (["tolist at geometry.py"] if objective == "supcon" else [])
    assert ours == expected, counter.found[3]


# Operations that make the host wait for the device on CUDA though no Python code reads a value, so the host-read count
# above cannot see them: outputs whose shape depends on values (nonzero, boolean-mask indexing, masked_select, unique,
# repeat_interleave by a tensor), values read inside an op (equal, is_nonzero, item), and a host scalar assigned by
# index (`x[rows, cols] = value`: the value is copied to the device with a wait, in the forward and in its backward;
# on an H200 this was the one synchronisation inside a SimCLR or CARE step). On a CPU none of them waits, so the test
# names them rather than timing them.
_WAIT_ON_CUDA = {
    "aten::nonzero", "aten::masked_select", "aten::_local_scalar_dense", "aten::equal", "aten::is_nonzero",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
}  # fmt: skip


def _waits_on_cuda(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    name = func._schema.name
    if name in _WAIT_ON_CUDA:
        return True
    if name == "aten::repeat_interleave":  # by a tensor of counts: the output's length is read from the device
        return func._overloadname == "Tensor" and kwargs.get("output_size") is None
    if name in ("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"):
        indices = [i for i in args[1] if i is not None]
        if any(i.dtype == torch.bool for i in indices):
            return True
        return name != "aten::index" and args[2].dim() == 0  # a scalar assigned by index
    return False


@contextlib.contextmanager
def _counting_waits() -> Iterator[list[str]]:
    """The CUDA-waiting operations run inside the block, each named with the frame that issued it; the views' random
    parameters and hue rounds are drawn on the host by design and left out."""
    found: list[str] = []

    class Scan(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if _waits_on_cuda(func, args, kwargs) and not _host_side():
                stack = traceback.extract_stack()
                caller = next((f for f in reversed(stack) if "/hf_contrast/" in f.filename), stack[-2])
                found.append(f"{func._schema.name} at {Path(caller.filename).name}:{caller.lineno}")
            return func(*args, **kwargs)

    with Scan():
        yield found


@pytest.mark.parametrize("objective", ["simclr", "care", "supcon"])
def test_no_operation_that_waits_for_the_device_outside_logging_steps(tmp_path, images, objective) -> None:
    make = {"simclr": lambda: "simclr", "care": lambda: CAREObjective(n_splits=2), "supcon": lambda: "supcon"}
    trainer = _trainer(
        tmp_path, images, make[objective](), max_steps=6, logging_steps=3, per_device_train_batch_size=4
    )
    scan = _PerStep(_counting_waits)
    trainer.add_callback(scan)
    trainer.train()
    for step in (2, 4, 5):
        assert scan.found[step] == [], f"step {step}: {scan.found[step]}"


@pytest.mark.parametrize(
    ("name", "fill"),
    [
        ("a scalar assigned by index", lambda x, i: x.__setitem__((i, i), float("-inf"))),
        ("a boolean mask", lambda x, i: x[x > 0]),
        ("nonzero", lambda x, i: (x > 0).nonzero()),
        ("repeat_interleave by a tensor", lambda x, i: x.repeat_interleave(torch.ones(len(x), dtype=torch.long), 0)),
    ],
)
def test_the_scan_names_the_operations_that_wait(name, fill) -> None:
    x, rows = torch.randn(4, 4), torch.arange(4)
    with _counting_waits() as found:
        x.diagonal().fill_(float("-inf"))  # what the losses do instead: nothing waits
        x.repeat_interleave(torch.ones(4, dtype=torch.long), 0, output_size=4)
    assert found == [], name
    with _counting_waits() as found:
        fill(x, rows)
    assert found, name


# ------------------------------------------------------------------------------ the views_on_device default


@pytest.mark.parametrize(
    ("device", "model", "objective", "expected", "source"),
    [
        ("cuda", "image", SimCLRObjective(), True, "default for image views on cuda"),
        ("cpu", "image", SimCLRObjective(), False, "default for image views on cpu"),
        ("cuda", "text", SimCLRObjective(), False, "default for text views on cuda"),
        ("cuda", "image", LOCALObjective(), False, "default for LOCAL's paired views on cuda"),
    ],
)
def test_views_on_device_defaults_to_the_accelerator_for_image_views(device, model, objective, expected, source):
    args = SimpleNamespace(views_on_device=None, device=torch.device(device))
    encoder = SimpleNamespace(input_modality=model)
    assert resolve_views_on_device(args, encoder, objective) == source
    assert args.views_on_device is expected
    args = SimpleNamespace(views_on_device=False, device=torch.device("cuda"))
    assert resolve_views_on_device(args, encoder, objective) == "argument" and args.views_on_device is False


def test_the_default_is_said_in_the_run_set_up(tmp_path: Path, images) -> None:
    trainer = _trainer(tmp_path, images, views_on_device=None)
    assert trainer.args.views_on_device is False  # a CPU run
    assert describe_run(trainer)["views"] == (
        "made per sample in the DataLoader (`views_on_device`'s default for image views on cpu)"
    )
    text = ContrastiveTrainer(
        model=tiny_text_encoder(), args=training_args(tmp_path / "text", image_size=None), objective="simclr",
        train_dataset=datasets.Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"] * 2}),
    )  # fmt: skip
    assert text.args.views_on_device is False and text.views_on_device_source == "default for text views on cpu"


# ------------------------------------------------------------------------------ torch.compile


IMAGE_OBJECTIVES = ["simclr", "care", "care_moco", "supcon", "ocl", "simo", "spectral", "vicreg", "binary_nce"]


@pytest.mark.parametrize("name", IMAGE_OBJECTIVES + ["align_uniform"])
def test_torch_compile_trains_every_image_objective(tmp_path: Path, images, name: str) -> None:
    """``torch_compile=True`` (TorchDynamo; the ``eager`` backend keeps the CPU test fast, the graph capture and the
    wrapped model are the same as inductor's): trains, evaluates and saves a model that loads back."""
    hyper = {"care": {"n_splits": 2}, "care_moco": {"n_splits": 2, "moco_queue_size": 16}}.get(name, {})
    if name == "simo":  # fewer than half the classes per batch
        hyper, images = {"classes_per_batch": 2, "samples_per_class": 4}, image_dataset(n=60, size=20, n_classes=10)
    objective = get_objective(name)(**hyper)
    trainer = _trainer(
        tmp_path, images, objective, max_steps=2, torch_compile=True, torch_compile_backend="eager",
        per_device_eval_batch_size=16,
    )  # fmt: skip
    trainer.eval_dataset = images.select(range(16))
    output = trainer.train()
    assert hasattr(trainer.model_wrapped, "_orig_mod")  # the Trainer trained torch.compile's module
    if name != "align_uniform":  # the device views' pass is compiled with the model's backend, and the run says so
        assert trainer.views.device_views().views.compile == {"backend": "eager", "mode": None}
        assert trainer.run_setup["views"].startswith("made on the device, per batch, compiled with the model's")
    assert np.isfinite(output.training_loss)
    trainer.evaluate()
    trainer.save_model()
    from hf_contrast.models import ContrastiveEncoder

    reloaded = ContrastiveEncoder.from_pretrained(tmp_path)
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(
        reloaded(pixel_values=x)["embeddings"], trainer.model.eval()(pixel_values=x)["embeddings"]
    )
