"""CARETrainer / OCLTrainer / SimOTrainer with ``gather_distributed=True``: 2 processes vs one on the global batch.

Launched by ``tests/distributed/test_trainer_distributed.py`` as::

    accelerate launch --multi_gpu --num_processes 2 trainer_distributed.py OUT_DIR

Each run trains a BN-free tiny ViT for a few SGD steps on fixed (deterministic) views, with the
sequential sampler, so that process ``r`` sees rows ``[r·b, (r+1)·b)`` of each global batch of
``2b`` rows. Rank 0 saves the final parameters to ``OUT_DIR/<method>.pt``; every rank saves the
objective-owned parameters of a learnable BinaryNCE run to ``OUT_DIR/binary_nce_rank<r>.pt``. The test
runs :func:`run` in its own process for the single-process reference (batch ``2b``, twice the
splits, so CARE's chunks keep their size).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from process_end import finish_process  # noqa: E402
from trainer_utils import (  # noqa: E402
    fixed_equivariance_views,
    fixed_views_collator,
    image_dataset,
    parameters,
    training_args,
    vit_encoder,
)

from hf_contrast import distributed  # noqa: E402
from hf_contrast.objectives import BinaryNCEObjective, CAREObjective, OCLObjective, SimOObjective  # noqa: E402
from hf_contrast.training import CARETrainer, OCLTrainer, SimCLRTrainer, SimOTrainer  # noqa: E402

STEPS = 3
LOCAL_BATCH = 4
LOCAL_SPLITS = 2
N_SAMPLES = 32


def run(method: str, out_dir: Path, batch_size: int, n_splits: int) -> dict[str, Any]:
    """Train ``method`` ("care", "care_cached": CARE with the encoder in mini-batches of 3 rows, or "ocl") and
    return the final parameters and logs."""
    data = image_dataset(n=N_SAMPLES, size=16, n_classes=4)
    args = training_args(
        out_dir / f"run_{method}", max_steps=STEPS, per_device_train_batch_size=batch_size,
        optim="sgd", learning_rate=0.1, max_grad_norm=0.0, train_sampling_strategy="sequential",
        gather_distributed=True, gradient_cache_size=3 if method == "care_cached" else None,
    )  # fmt: skip
    if method in ("care", "care_cached"):
        objective = CAREObjective(
            care_weight=0.5, n_splits=n_splits, equivariance_augmentation=fixed_equivariance_views
        )
        trainer = CARETrainer(
            model=vit_encoder(), args=args, train_dataset=data, data_collator=fixed_views_collator, objective=objective
        )
    else:  # one view per sample: the local batches hold 4 distinct classes, positives only across processes
        trainer = OCLTrainer(
            model=vit_encoder(), args=args, train_dataset=data, data_collator=fixed_views_collator,
            objective=OCLObjective(n_views=1),
        )  # fmt: skip
    trainer.train()
    return {
        "parameters": parameters(trainer.model),
        "log_history": trainer.state.log_history,
        "skipped_batches": getattr(trainer.objective, "skipped_batches", 0),
    }


def run_simo(out_dir: Path, classes_per_batch: int) -> dict[str, Any]:
    """SimO with ``gather_distributed=True`` and ``classes_per_batch`` classes of 2 samples per process, on 10
    classes: on 2 processes the sampler deals each step's 2 batches 2 + 2 distinct classes, drawn as one process's
    batch of 4 classes is (same seed), so both runs score the same global AFCL batch."""
    data = image_dataset(n=N_SAMPLES, size=16, n_classes=10)
    args = training_args(
        out_dir / "run_simo", max_steps=STEPS, per_device_train_batch_size=2 * classes_per_batch,
        optim="sgd", learning_rate=1e-5, max_grad_norm=0.0, gather_distributed=True,  # raw embeddings: a small rate
    )  # fmt: skip
    objective = SimOObjective(classes_per_batch=classes_per_batch, samples_per_class=2, olean=0.3)
    trainer = SimOTrainer(
        model=vit_encoder(), args=args, train_dataset=data, data_collator=fixed_views_collator, objective=objective
    )
    trainer.train()
    return {"parameters": parameters(trainer.model), "log_history": trainer.state.log_history}


def run_learnable_loss(out_dir: Path) -> dict[str, torch.Tensor]:
    """A learnable BinaryNCE run: the objective-owned parameters must stay identical on every process."""
    data = image_dataset(n=N_SAMPLES, size=16)
    args = training_args(
        out_dir / "run_binary_nce", max_steps=2, per_device_train_batch_size=LOCAL_BATCH, learning_rate=0.05
    )
    objective = BinaryNCEObjective(learnable_temperature=True, learnable_bias=True)
    trainer = SimCLRTrainer(
        model=vit_encoder(), args=args, train_dataset=data, objective=objective, data_collator=fixed_views_collator
    )
    trainer.train()
    return {name: p.detach().cpu().clone() for name, p in objective.loss.named_parameters()}


def main() -> None:
    out_dir = Path(sys.argv[1])
    for method in ("care", "care_cached", "ocl"):
        result = run(method, out_dir, LOCAL_BATCH, LOCAL_SPLITS)
        if distributed.rank() == 0:
            torch.save(result, out_dir / f"{method}.pt")
    simo = run_simo(out_dir, classes_per_batch=2)
    if distributed.rank() == 0:
        torch.save(simo, out_dir / "simo.pt")
    torch.save(run_learnable_loss(out_dir), out_dir / f"binary_nce_rank{distributed.rank()}.pt")
    finish_process()


if __name__ == "__main__":
    main()
