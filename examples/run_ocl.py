#!/usr/bin/env python
# run_ocl.py — OCL vs SupCon on long-tailed data with small batches.
#
# OCL, the orthonormal contrastive loss of LOCAL (docs/methods.md §3), is SupCon where every negative
# enters the denominator through |cos|: classes are pushed to orthogonal directions instead of
# opposite ones, which matters when a small batch holds few classes and the classes are skewed.
# With no arguments: a timm ResNet-18 from scratch on the embedded digits as they are, batches of 32
# images × 2 views; `--imbalance_ratio 10` first makes the training split long-tailed (the largest
# class keeps 10× the images of the smallest); data that is already long-tailed is used as is.
# Reports accuracy and macro-F1 of a linear probe and of a kNN classifier fitted on frozen features of
# the training split and scored on the test split (ProbeEvaluator, at every evaluation and at the end),
# the trainer's metrics of the test split, and the orthogonality of its class means in the projection
# space (mean |cos|, 0 = orthogonal). `--method supcon` trains the SupCon baseline.
#
# Launch:
#   one CPU or GPU   python examples/run_ocl.py [--method supcon] [--imbalance_ratio 10] [--dataset <image folder>]
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_ocl.py --gather_distributed
#                    (--gather_distributed: anchors see the negatives of every process, as one big batch)
# Resuming: a checkpoint in --output_dir is picked up; --overwrite_output_dir starts from scratch instead.
# Writes to --output_dir (default outputs/<method>): the encoder and its model card, train_results.json,
# eval_results.json, all_results.json, trainer_state.json, embeddings.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import transformers
from transformers.trainer_utils import set_seed

from hf_contrast.data import load_image_splits, make_long_tailed
from hf_contrast.errors import InputError
from hf_contrast.evaluation import ProbeEvaluator, balanced_subset, encode_dataset
from hf_contrast.metrics import class_orthogonality
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.plots import save_training_plots
from hf_contrast.training import (
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    check_image_backbone,
    check_sample_caps,
    check_script_phases,
    detect_last_checkpoint,
    evaluate_final,
    finished_run,
    notice_small_image_stem,
    parse_args_with_objective,
    run_main,
    setup_logging,
    small_image_stem_field,
)

logger = transformers.utils.logging.get_logger(__name__)

# Defaults chosen so that a bare run finishes in a few minutes on a 2-core CPU; every flag overrides them.
DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 300,
    "per_device_train_batch_size": 32,  # small batches: few positives and few classes per batch
    "per_device_eval_batch_size": 256,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,  # a float < 1 is a fraction of the total steps
    "eval_strategy": "steps",
    "eval_steps": 100,
    "save_strategy": "steps",
    "save_steps": 100,
    "save_total_limit": 1,
    "logging_steps": 10,
    "report_to": "none",  # no tracker unless asked (`--report_to tensorboard`)
    "dataloader_num_workers": 0,
    "dataloader_pin_memory": torch.accelerator.is_available(),  # pinned memory only helps copies to a GPU
    # Without a GPU: CPU training; `accelerate launch --multi_gpu --num_processes N` runs N CPU processes (gloo DDP).
    "use_cpu": not torch.accelerator.is_available(),
    "seed": 0,
}


@dataclass
class ScriptArguments:
    """What to train and on which data (temperature, n_views: the objective's config flags)."""

    method: str = field(default="ocl", metadata={"help": "A registered supervised objective: ocl or supcon."})
    imbalance_ratio: float | None = field(
        default=None,
        metadata={"help": "Make the training split long-tailed: largest / smallest class size (None: as is)."},
    )
    model: str = field(default="resnet18", metadata={"help": "Any timm model name."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    small_image_stem: bool | None = small_image_stem_field()
    dataset: str | None = field(
        default=None, metadata={"help": "Image folder or Hub dataset id; default: the embedded digits."}
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "Name of the data in the model card (default: the folder name or Hub id)."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on a class-balanced subset of this many rows."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on a class-balanced subset of this many rows."}
    )
    projection_plot: Literal["pca", "tsne"] = field(
        default="tsne", metadata={"help": "2-D projection of the test embeddings: pca or tsne."}
    )
    max_plot_samples: int = field(
        default=2000, metadata={"help": "Test embeddings (class-balanced) in embeddings.png."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from scratch even if --output_dir holds a checkpoint or an earlier run."},
    )


def main() -> None:
    script, training_args, config = parse_args_with_objective(
        (ScriptArguments, ContrastiveTrainingArguments), method="ocl", defaults=DEFAULTS
    )
    if training_args.output_dir == DEFAULTS["output_dir"]:
        training_args.output_dir = DEFAULTS["output_dir"].format(method=script.method)
    setup_logging(training_args, __name__)
    check_image_backbone(script.model)  # a timm model, said before any data is read
    check_sample_caps(script)  # before any data is read
    check_script_phases()  # --do_train false / --do_eval false / --do_predict: not what it does
    last_checkpoint = detect_last_checkpoint(training_args, script.overwrite_output_dir)
    if (finished := finished_run(training_args, last_checkpoint, script.method)) is not None:
        logger.warning(finished)  # run again: nothing to do, nothing changed
        return
    set_seed(training_args.seed)

    # ---- data: images stay undecoded until the collators and evaluators, which name (or skip) a bad file ----
    try:
        data = load_image_splits(
            script.dataset, image_column=training_args.image_column, label_column=training_args.label_column,
            image_size=training_args.image_size or 32, max_train_samples=script.max_train_samples,
            max_eval_samples=script.max_eval_samples, seed=training_args.seed,
            dataset_name=script.dataset_name,
        )  # fmt: skip
    except InputError as error:  # a missing path, a refused folder layout: the message names the fix
        raise SystemExit(f"--dataset: {error}") from error
    except (ConnectionError, OSError) as error:  # offline / unknown Hub id: say what to pass instead
        raise SystemExit(
            f"Could not load the dataset `{script.dataset}` ({type(error).__name__}: {error}).\nOffline, pass a local "
            "image folder instead (`--dataset path/to/folder`, one sub-folder per class), or drop `--dataset` "
            "to use the embedded scikit-learn digits."
        ) from error
    training_args.image_column, training_args.label_column = "image", "label"  # the loader renames the chosen columns
    label_feature = data["train"].features.get(training_args.label_column)
    class_names = list(label_feature.names) if hasattr(label_feature, "names") else None
    train_dataset = make_long_tailed(
        data["train"], script.imbalance_ratio, label_column=training_args.label_column, seed=training_args.seed
    )
    eval_dataset = data["test"]

    # ---- model, evaluator, trainer ----
    try:
        encoder = ContrastiveEncoder.from_backbone(
            script.model,
            pretrained=script.pretrained,
            small_image_stem=bool(script.small_image_stem),
            projection_dim=script.projection_dim,
        )
    except HubUnavailableError as error:
        scratch = f"\nOr drop `--pretrained` to train `{script.model}` from scratch." if script.pretrained else ""
        raise SystemExit(f"{error}{scratch}") from error
    notice_small_image_stem(encoder, script.small_image_stem, training_args.image_size, train_dataset)
    # Macro-F1 weighs every class alike, so the rare classes count: the probes report it next to the accuracy.
    encode = dict(
        input_column=training_args.image_column, label_column=training_args.label_column,
        batch_size=training_args.per_device_eval_batch_size, on_bad_image=training_args.on_bad_image,
    )  # fmt: skip
    probe = ProbeEvaluator(
        train_dataset, eval_dataset, knn_k=training_args.knn_k, knn_temperature=training_args.knn_temperature,
        seed=training_args.seed, progress=False, **encode,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=encoder, args=training_args, objective=get_objective(script.method)(config),
        train_dataset=train_dataset, eval_dataset=eval_dataset, evaluator=probe,
    )  # fmt: skip
    counts = sorted(Counter(train_dataset[training_args.label_column]).values(), reverse=True)
    shape = "as is" if script.imbalance_ratio is None else f"long-tailed with imbalance {script.imbalance_ratio:g}"
    logger.info(
        f"Training {script.method} on {script.dataset or 'the embedded digits'} ({shape}: class sizes {counts}, "
        f"ratio {counts[0] / counts[-1]:.1f}), batches of {training_args.per_device_train_batch_size}."
    )

    # ---- training ----
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and last_checkpoint is not None:
        checkpoint = True  # the newest *complete* checkpoint (hf_contrast checks it, and falls back with a warning)
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()  # the encoder and its model card
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    metrics["train_imbalance_ratio"] = counts[0] / counts[-1]  # largest / smallest class (the class sizes: the log)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    # ---- evaluation of the final encoder, and the orthogonality of the class means of its projections ----
    metrics = evaluate_final(trainer)  # the saved weights' evaluation, logged at their step (last or best)
    metrics["eval_samples"] = len(eval_dataset)
    model = trainer.accelerator.unwrap_model(trainer.model)
    bars = not training_args.disable_tqdm  # encoding the test set shows a bar
    test_z, test_y = encode_dataset(model, eval_dataset, progress=bars, **encode)
    test_p, _ = encode_dataset(model, eval_dataset, output="projections", progress=bars, **encode)
    # Of the projections the loss shapes (the trainer's `class_orthogonality` uses `eval_representation`).
    metrics["eval_projection_class_orthogonality"] = class_orthogonality(test_p, test_y)
    model.model_card_data.add_metrics({key: metrics[key] for key in metrics if key.startswith("eval_projection_")})
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)

    if trainer.is_world_process_zero():  # the pictures
        shown = balanced_subset(test_y, min(script.max_plot_samples, len(test_y)), training_args.seed)
        save_training_plots(
            training_args.output_dir, script.method, log_history=trainer.state.log_history, z=test_z[shown],
            labels=test_y[shown], class_names=class_names, projection=script.projection_plot, seed=training_args.seed,
        )  # fmt: skip

    # ---- model card and the Hub ----
    kwargs: dict[str, Any] = {"tags": [script.method]}  # the data's names: the loaders' (`info.dataset_name`)
    if script.dataset and not os.path.isdir(script.dataset):
        kwargs["dataset_tags"] = script.dataset
    if script.pretrained and not os.path.isdir(script.model):
        kwargs["finetuned_from"] = script.model
    if training_args.push_to_hub:
        trainer.push_to_hub(**kwargs)
    else:
        trainer.create_model_card(**kwargs)

    # Every process ends together and closes its process group: one that leaves first while another still
    # writes the pictures or the card is aborted at exit by torch.distributed (SIGABRT, the run fails).
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()


if __name__ == "__main__":
    run_main(main)  # an input error ends the run with its message, no traceback
