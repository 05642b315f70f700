#!/usr/bin/env python
# run_simo.py — supervised SimO / AFCL: classes pulled together, class means pushed to orthogonality.
#
# SimO (https://arxiv.org/abs/2410.05233) trains on class-major batches of C classes × k samples
# (the AFCL sampler, C < half the classes) with the similarity–orthogonality loss on the raw
# (un-normalised) projections. With no arguments: a timm ResNet-18 from scratch on the embedded
# scikit-learn digits, C = 4 classes × k = 32 images per batch; reports the class-mean
# orthogonality of the test projections (mean |cos| between class means, 0 = orthogonal) and
# linear-probe / kNN accuracy and macro-F1 of frozen features (fitted on train, scored on test), with
# the trainer's metrics of the test split, at every evaluation and at the end.
#
# Launch:
#   one CPU or GPU   python examples/run_simo.py [--dataset <image folder>]
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_simo.py
#                    (each process draws its own C × k batch; the sampler's batches are sharded; with
#                    --gather_distributed the processes' groups are one batch of 4·C distinct classes)
# Options: --classes_per_batch, --samples_per_class (the batch size is their product; a
#          --per_device_train_batch_size that differs is an error naming both), --replacement (draw a class's
#          samples with replacement: for classes with fewer than --samples_per_class images), --olean,
#          --n_views 2, --model, --dataset, --image_column, --label_column, every TrainingArguments flag.
# Resuming: a checkpoint in --output_dir is picked up; --overwrite_output_dir starts from scratch instead.
# Writes to --output_dir (default outputs/simo): the encoder and its model card, train_results.json,
# eval_results.json, all_results.json, trainer_state.json, embeddings.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import transformers
from transformers.trainer_utils import set_seed

from hf_contrast.data import load_image_splits
from hf_contrast.errors import InputError
from hf_contrast.evaluation import ProbeEvaluator, balanced_subset, encode_dataset
from hf_contrast.metrics import class_orthogonality, effective_rank
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
    training_length,
)

logger = transformers.utils.logging.get_logger(__name__)

# Defaults chosen so that a bare run finishes in a few minutes on a 2-core CPU; every flag overrides them.
DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 200,
    "classes_per_batch": 4,  # C < 10 / 2 classes per batch (the paper's stability fix)
    "samples_per_class": 32,
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
    """What to train and on which data (SimO hyperparameters: the objective's config flags)."""

    method: str = field(
        default="simo", metadata={"help": "A registered objective needing class-major batches (simo)."}
    )
    model: str = field(default="resnet18", metadata={"help": "Any timm model name."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(
        default=64, metadata={"help": "Output size of the projection head (>= the number of classes)."}
    )
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
        default="tsne", metadata={"help": "2-D projection of the test projections: pca or tsne."}
    )
    max_plot_samples: int = field(
        default=2000, metadata={"help": "Test projections (class-balanced) in embeddings.png."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from scratch even if --output_dir holds a checkpoint or an earlier run."},
    )


def main() -> None:
    script, training_args, config = parse_args_with_objective(
        (ScriptArguments, ContrastiveTrainingArguments), method="simo", defaults=DEFAULTS
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
    train_dataset, eval_dataset = data["train"], data["test"]
    training_args.image_column, training_args.label_column = "image", "label"  # the loader renames the chosen columns
    label_feature = train_dataset.features.get(training_args.label_column)
    class_names = list(label_feature.names) if hasattr(label_feature, "names") else None

    # ---- model, evaluator, trainer ----
    try:  # SimO works on raw projections: its orthogonality term needs them un-normalised.
        encoder = ContrastiveEncoder.from_backbone(
            script.model,
            pretrained=script.pretrained,
            small_image_stem=bool(script.small_image_stem),
            projection_dim=script.projection_dim,
            normalize_projections=False,
        )
    except HubUnavailableError as error:
        scratch = f"\nOr drop `--pretrained` to train `{script.model}` from scratch." if script.pretrained else ""
        raise SystemExit(f"{error}{scratch}") from error
    notice_small_image_stem(encoder, script.small_image_stem, training_args.image_size, train_dataset)
    encode = dict(
        input_column=training_args.image_column, label_column=training_args.label_column,
        batch_size=training_args.per_device_eval_batch_size, on_bad_image=training_args.on_bad_image,
    )  # fmt: skip
    probe = ProbeEvaluator(  # linear probe and kNN fitted on the train split, scored on the test split
        train_dataset, eval_dataset, knn_k=training_args.knn_k, knn_temperature=training_args.knn_temperature,
        seed=training_args.seed, progress=False, **encode,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=encoder, args=training_args, objective=get_objective(script.method)(config),
        train_dataset=train_dataset, eval_dataset=eval_dataset, evaluator=probe,
    )  # fmt: skip
    logger.info(
        f"Training {script.method} on {script.dataset or 'the embedded digits'} ({len(train_dataset)} train images): "
        f"{training_length(training_args)} of batches of {config.classes_per_batch} classes × "
        f"{config.samples_per_class} images."
    )

    # ---- training ----
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and last_checkpoint is not None:
        checkpoint = True  # the newest *complete* checkpoint (hf_contrast checks it, and falls back with a warning)
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()  # the encoder and its model card
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    # ---- evaluation of the final encoder, and the geometry of the projections SimO shapes ----
    metrics = evaluate_final(trainer)  # the saved weights' evaluation, logged at their step (last or best)
    metrics["eval_samples"] = len(eval_dataset)
    model = trainer.accelerator.unwrap_model(trainer.model)
    bars = not training_args.disable_tqdm  # encoding the test set shows a bar
    test_p, test_y = encode_dataset(model, eval_dataset, output="projections", progress=bars, **encode)
    # Of the projections SimO shapes (the trainer's `class_orthogonality` uses `eval_representation`).
    metrics["eval_projection_class_orthogonality"] = class_orthogonality(test_p, test_y)
    metrics["eval_projection_effective_rank"] = effective_rank(test_p)
    model.model_card_data.add_metrics({key: metrics[key] for key in metrics if key.startswith("eval_projection_")})
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)

    if trainer.is_world_process_zero():  # the pictures
        shown = balanced_subset(test_y, min(script.max_plot_samples, len(test_y)), training_args.seed)
        save_training_plots(
            training_args.output_dir, script.method, log_history=trainer.state.log_history, z=test_p[shown],
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
