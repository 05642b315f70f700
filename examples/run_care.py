#!/usr/bin/env python
# run_care.py — train an image encoder from scratch with CARE, SimCLR or any registered objective.
#
# CARE (Contrastive Augmentation-induced Rotational Equivariance, https://arxiv.org/abs/2306.13924)
# adds to SimCLR's InfoNCE a term λ·L_equi that asks every augmentation to act on the embedding
# sphere as ONE rotation (the batch is cut into `--n_splits` chunks sharing an augmentation pair).
# With no arguments this trains a timm ResNet-18 from scratch on the embedded scikit-learn digits
# (32×32, nothing downloaded) and reports, at every evaluation and at the end, the trainer's metrics of
# the test split (alignment of two evaluation views, uniformity, …), linear-probe and kNN accuracy and
# macro-F1 of frozen features (fitted on the train split, scored on the test split: ProbeEvaluator), and
# the Wahba error and γ_f of test embeddings under sampled augmentations (lower = closer to a rotation).
#
# Launch (the same script everywhere, Accelerate picks the devices):
#   one CPU or GPU      python examples/run_care.py
#                       (one CPU process uses every core unless OMP_NUM_THREADS is set)
#   several GPUs        accelerate launch --multi_gpu --num_processes 8 examples/run_care.py --gather_distributed
#   2 CPU processes     accelerate launch --multi_gpu --num_processes 2 examples/run_care.py   (gloo; for testing)
#                       Only `--multi_gpu` starts N processes: `accelerate launch --num_processes 2` (with or without
#                       `--cpu`) runs ONE. Under `accelerate launch` each process uses OMP_NUM_THREADS threads:
#                       accelerate's `--num_cpu_threads_per_process`, by default your OMP_NUM_THREADS, else 1.
# Image size: --image_size N if given; else a --pretrained backbone's size; else the images' own size when they
# share one (the digits: 32 px; Fashion-MNIST: 28 px); else the backbone's default, with a warning. The trainer
# logs it at start-up with the other defaults that shape the result (precision, processes × threads, chunk size,
# evaluation caps) and the model card's training section repeats them.
# Variants: --method simclr | care_moco | spectral | vicreg | binary_nce | … (any registered objective;
#           `--method X --help` lists X's hyperparameter flags); --model <timm name> [--pretrained];
#           --dataset <image folder or Hub id>; every TrainingArguments flag (--max_steps, --push_to_hub…).
# Resuming: a checkpoint in --output_dir is picked up (checkpoints every --save_steps); a finished run is left as
# it is (a larger --max_steps continues it); --overwrite_output_dir starts from scratch instead.
# Writes to --output_dir (default outputs/<method>): the encoder and its model card, train_results.json,
# eval_results.json, all_results.json, trainer_state.json, embeddings.png, augmentation_cosines.png,
# loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import transformers
from transformers.trainer_utils import set_seed

from hf_contrast.data import load_image_splits
from hf_contrast.errors import InputError
from hf_contrast.evaluation import (
    EquivarianceEvaluator,
    ProbeEvaluator,
    SequentialEvaluator,
    TaskHeadEvaluator,
    balanced_subset,
    encode_dataset,
)
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.plots import save_training_plots
from hf_contrast.training import (
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    check_image_backbone,
    check_sample_caps,
    check_script_phases,
    check_task_head,
    detect_last_checkpoint,
    evaluate_final,
    finished_run,
    notice_small_image_stem,
    parse_args_with_objective,
    resolve_image_size,
    run_main,
    set_cpu_threads,
    setup_logging,
    small_image_stem_field,
    training_length,
)

logger = transformers.utils.logging.get_logger(__name__)

# Defaults chosen so that a bare run finishes in a few minutes on a 2-core CPU; every flag overrides them.
DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 150,
    "per_device_train_batch_size": 128,  # CARE: 4 views per image, 512 images per step
    "per_device_eval_batch_size": 256,
    "learning_rate": 2e-3,
    "weight_decay": 1e-4,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,  # a float < 1 is a fraction of the total steps
    "n_splits": 8,  # CARE: chunks of m = 16 images share one augmentation pair
    "moco_queue_size": 1024,  # CARE-MoCo: the digits have 1,437 training images
    "eval_strategy": "steps",
    "eval_steps": 50,
    "save_strategy": "steps",
    "save_steps": 50,
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
    """What to train and on which data (method hyperparameters: the objective's config flags)."""

    method: str = field(default="care", metadata={"help": "A registered objective (care, simclr, care_moco, …)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model name (or 'hf-hub:…' / 'local-dir:…')."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    small_image_stem: bool | None = small_image_stem_field()
    task_head: bool = field(
        default=False,
        metadata={
            "help": "Add a linear classification head on the embeddings (one output per class of --dataset), trained "
            "with cross-entropy by the objectives that have a task term (align_uniform: --task_loss_weight; with "
            "--align_weight 0 --uniform_weight 0 that is plain supervised training, the convergence benchmark's "
            "reference). Other methods refuse it."
        },
    )
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
    num_probe_images: int = field(
        default=256, metadata={"help": "Test images (class-balanced) for the Wahba error / γ_f."}
    )
    num_augmentations: int = field(default=8, metadata={"help": "Sampled augmentations for the Wahba error / γ_f."})
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
        (ScriptArguments, ContrastiveTrainingArguments), method="care", defaults=DEFAULTS
    )
    if training_args.output_dir == DEFAULTS["output_dir"]:
        training_args.output_dir = DEFAULTS["output_dir"].format(method=script.method)
    setup_logging(training_args, __name__)
    check_image_backbone(script.model)  # a timm model, said before any data is read
    check_sample_caps(script)  # before any data is read
    check_script_phases()  # --do_train false / --do_eval false / --do_predict: not what it does
    check_task_head(script.method, script.task_head)
    last_checkpoint = detect_last_checkpoint(training_args, script.overwrite_output_dir)
    if (finished := finished_run(training_args, last_checkpoint, script.method)) is not None:
        logger.warning(finished)  # run again: nothing to do, nothing changed
        return
    set_cpu_threads(training_args)  # one plain CPU process: every core, unless OMP_NUM_THREADS is set
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
    if script.task_head and not class_names:
        raise SystemExit("--task_head needs a dataset with named classes (an image folder, or a ClassLabel column).")
    head = {"id2label": dict(enumerate(class_names))} if script.task_head else {}

    # ---- model, evaluators, trainer ----
    try:
        encoder = ContrastiveEncoder.from_backbone(
            script.model,
            pretrained=script.pretrained,
            small_image_stem=bool(script.small_image_stem),
            projection_dim=script.projection_dim,
            **head,
        )
    except HubUnavailableError as error:
        scratch = f"\nOr drop `--pretrained` to train `{script.model}` from scratch." if script.pretrained else ""
        raise SystemExit(f"{error}{scratch}") from error
    # The image size, decided once and stored in the encoder's data config, which the evaluators below and the
    # trainer read (hf_contrast.training.resolve_image_size: --image_size, else the pretrained size, else the
    # images' own; the trainer logs the choice and why).
    resolve_image_size(encoder, training_args.image_size, train_dataset, training_args.image_column)
    notice_small_image_stem(encoder, script.small_image_stem, training_args.image_size, train_dataset)
    encode = dict(
        input_column=training_args.image_column, label_column=training_args.label_column,
        batch_size=training_args.per_device_eval_batch_size, on_bad_image=training_args.on_bad_image,
    )  # fmt: skip
    probe = ProbeEvaluator(
        train_dataset, eval_dataset, knn_k=training_args.knn_k, knn_temperature=training_args.knn_temperature,
        seed=training_args.seed, progress=False, **encode,
    )  # fmt: skip
    equivariance = EquivarianceEvaluator.from_image_dataset(  # the Wahba/γ_f views at the run's image size
        eval_dataset, encoder.data_config,
        num_samples=min(script.num_probe_images, len(eval_dataset)), image_column=training_args.image_column,
        label_column=training_args.label_column, seed=training_args.seed, num_augmentations=script.num_augmentations,
        on_bad_image=training_args.on_bad_image,
    )  # fmt: skip
    # --task_head: the trained classifier's own accuracy and macro-F1 on the test split
    head_evaluator = [TaskHeadEvaluator(eval_dataset, progress=False, **encode)] if script.task_head else []
    trainer = ContrastiveTrainer(
        model=encoder,
        args=training_args,
        objective=get_objective(script.method)(config),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        evaluator=SequentialEvaluator([probe, equivariance, *head_evaluator]),
    )
    # the evaluation images: the data's test split, else its validation split, else a fraction held out of train
    split = str(eval_dataset.split)
    evaluated = split if split in ("test", "validation") else "held-out"
    logger.info(
        f"Training {script.method} on {script.dataset or 'the embedded digits'} ({len(train_dataset)} train / "
        f"{len(eval_dataset)} {evaluated} images) with {script.model} "
        f"({'pretrained' if script.pretrained else 'from scratch'}) for {training_length(training_args)} (image size, "
        "precision, processes × threads: the trainer's start-up log)."
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

    # ---- evaluation of the final encoder: the trainer's metrics, the probes and the equivariance ----
    metrics = evaluate_final(trainer)  # the saved weights' evaluation, logged at their step (last or best)
    metrics["eval_samples"] = len(eval_dataset)
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)

    if trainer.is_world_process_zero():  # the pictures
        model = trainer.accelerator.unwrap_model(trainer.model)
        test_z, test_y = encode_dataset(model, eval_dataset, progress=not training_args.disable_tqdm, **encode)
        shown = balanced_subset(test_y, min(script.max_plot_samples, len(test_y)), training_args.seed)
        model.eval()
        with torch.no_grad():
            f, f_a = equivariance.embeddings(model)
        save_training_plots(
            training_args.output_dir, script.method, log_history=trainer.state.log_history, z=test_z[shown],
            labels=test_y[shown], class_names=class_names, f=f, f_a=f_a, projection=script.projection_plot,
            seed=training_args.seed,
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
