"""Cached-gradient training: the encoder in mini-batches gives the full-batch step's gradients."""

from __future__ import annotations

import datasets
import pytest
import torch
from _tiny import tiny_text_encoder, tiny_tokenizer
from distributed_scripts.trainer_utils import (
    fixed_equivariance_views,
    fixed_views_collator,
    image_dataset,
    training_args,
    vit_encoder,
)

from hf_contrast.objectives import CAREObjective, SupConObjective
from hf_contrast.training import ContrastiveTrainer, ContrastiveTrainingArguments
from hf_contrast.training.callbacks import GradientCache

SENTENCES = ["the cat sat on the mat", "a dog is red", "hello world", "the man and the woman", "a red car",
             "the dog sat", "a cat and a dog", "hello the world is red"]  # fmt: skip


def _gradients(trainer: ContrastiveTrainer, batch: dict) -> dict[str, torch.Tensor]:
    model = trainer.model
    model.zero_grad(set_to_none=True)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; one step here
    trainer.training_step(model, dict(batch))
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(direct: dict, cached: dict, atol: float = 1e-5) -> None:
    assert direct.keys() == cached.keys() and direct
    for name in direct:
        torch.testing.assert_close(cached[name], direct[name], atol=atol, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "objective",
    [
        lambda: "simclr",
        lambda: CAREObjective(n_splits=2, equivariance_augmentation=fixed_equivariance_views),
        lambda: SupConObjective(),
    ],
    ids=["simclr", "care", "supcon"],
)
def test_cached_step_equals_the_direct_step_for_a_layernorm_image_encoder(tmp_path, objective) -> None:
    data = image_dataset(n=8, size=16)
    batch = fixed_views_collator([data[i] for i in range(8)])
    grads = {}
    for cache in (None, 3):  # 3 does not divide the 16-32 rows of the views: ragged mini-batches too
        torch.manual_seed(0)
        trainer = ContrastiveTrainer(
            model=vit_encoder(), args=training_args(tmp_path, gradient_cache_size=cache), train_dataset=data,
            data_collator=fixed_views_collator, objective=objective(),
        )  # fmt: skip
        grads[cache] = _gradients(trainer, batch)
    _assert_same(grads[None], grads[3])


def _text_trainer(tmp_path, cache: int | None, dropout: float) -> ContrastiveTrainer:
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    model = tiny_text_encoder(tokenizer, projection_norm=None)  # no batch statistics: exact
    model.backbone.config.hidden_dropout_prob = dropout
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = dropout
    args = training_args(tmp_path, gradient_cache_size=cache)
    return ContrastiveTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_dict({"text": SENTENCES}), objective="simclr"
    )


def test_cached_step_equals_the_direct_step_for_bert(tmp_path) -> None:
    grads = {}
    for cache in (None, 3):
        trainer = _text_trainer(tmp_path, cache, dropout=0.0)
        batch = trainer.data_collator([{"text": s} for s in SENTENCES])
        grads[cache] = _gradients(trainer, batch)
    _assert_same(grads[None], grads[3])


def test_dropout_is_replayed_so_simcse_views_match_in_both_passes(tmp_path) -> None:
    # With dropout the masks depend on how the rows are split, so compare the cache with ONE mini-batch
    # (same masks as the direct pass iff the graph pass replays the RNG of the no-graph pass).
    grads = {}
    for cache in (None, 16):
        trainer = _text_trainer(tmp_path, cache, dropout=0.3)
        batch = trainer.data_collator([{"text": s} for s in SENTENCES])
        torch.manual_seed(123)
        grads[cache] = _gradients(trainer, batch)
    _assert_same(grads[None], grads[16])


def test_gradient_cache_size_is_validated(tmp_path) -> None:
    with pytest.raises(ValueError, match="`gradient_cache_size`"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), gradient_cache_size=0)
    with pytest.raises(ValueError, match="`gradient_cache_size`"):
        GradientCache(0)


def test_batchnorm_running_statistics_move_once_per_mini_batch(tmp_path) -> None:
    # The no-graph pass must not touch BatchNorm's running statistics: only the graph pass updates them,
    # so a cached step moves them exactly like running its mini-batches through the encoder once.
    from _tiny import tiny_timm_encoder  # BatchNorm backbone and projection head

    data = image_dataset(n=8, size=32)
    batch = fixed_views_collator([data[i] for i in range(8)])
    torch.manual_seed(0)
    model = tiny_timm_encoder()
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = ContrastiveTrainer(
        model=model, args=training_args(tmp_path, gradient_cache_size=8, image_size=32), train_dataset=data,
        data_collator=fixed_views_collator, objective="simclr",
    )  # fmt: skip
    _gradients(trainer, batch)
    expected = tiny_timm_encoder()
    expected.load_state_dict(reference)
    expected.train()
    with torch.no_grad():  # the replay: the 16 view rows in mini-batches of 8, each once
        views = torch.cat([batch["pixel_values_1"], batch["pixel_values_2"]])
        for chunk in views.split(8):
            expected(pixel_values=chunk)
    got = model.state_dict()
    for name, value in expected.state_dict().items():
        if "running" in name or "num_batches_tracked" in name:
            torch.testing.assert_close(got[name], value, msg=name)


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="autograd's device thread needs a GPU")


def _dropout_text_encoder(tokenizer, dropout: float) -> torch.nn.Module:
    torch.manual_seed(0)
    model = tiny_text_encoder(tokenizer, projection_norm=None)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = dropout
    return model


@needs_gpu
def test_cached_step_on_a_gpu_equals_the_direct_step(tmp_path) -> None:
    """On a GPU the backward, and so the replay hook, runs in autograd's device thread, not the caller's: the
    replay must still draw the step's CUDA dropout masks. With one mini-batch (the rows of the direct pass) the
    cached step equals the direct one."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    data = datasets.Dataset.from_dict({"text": SENTENCES})
    grads = {}
    for cache in (None, 16):
        args = training_args(tmp_path, gradient_cache_size=cache, use_cpu=False)
        trainer = ContrastiveTrainer(
            model=_dropout_text_encoder(tokenizer, 0.3), args=args, train_dataset=data, objective="simclr"
        )
        batch = {k: v.cuda() for k, v in trainer.data_collator([{"text": s} for s in SENTENCES]).items()}
        torch.manual_seed(123)
        grads[cache] = _gradients(trainer, batch)
    _assert_same(grads[None], grads[16])


@needs_gpu
def test_cached_step_on_a_gpu_replays_under_the_steps_autocast(tmp_path) -> None:
    """A bf16 run on a GPU: the replayed passes (in autograd's device thread) run under the same bf16 autocast
    as the step's passes without a graph."""
    passes: list[tuple[bool, bool, torch.dtype]] = []  # (with a graph, autocast on, its dtype) of each pass

    def record_pass(*_: object) -> None:
        passes.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")))

    model = _dropout_text_encoder(tiny_tokenizer(tmp_path / "tok"), 0.1)
    model.backbone.register_forward_hook(record_pass)
    args = training_args(tmp_path, gradient_cache_size=4, use_cpu=False, bf16=True, max_steps=1)
    ContrastiveTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_dict({"text": SENTENCES}), objective="simclr"
    ).train()
    first = {state[1:] for state in passes if not state[0]}
    replayed = {state[1:] for state in passes if state[0]}
    assert first == replayed == {(True, torch.bfloat16)}, passes
