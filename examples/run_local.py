#!/usr/bin/env python
# run_local.py — LOCAL: classify pairs of images (pre, post) by the kind of change between them.
#
# LOCAL (latent orthonormal contrastive learning for paired images, docs/methods.md §3a) passes both
# images through one shared encoder and combines OCL on the normalised projection difference
# z = n(e_pre − e_post), β·OCL on a latent correlation embedding of the backbone's stage maps, and
# the class-weighted cross-entropy of a pair classifier, weighted by α (α decreases every epoch).
# `--contrastive supcon` gives the paper's L-SCL baseline.
#
# Pairs: with no --dataset they are made from the embedded digits; `--dataset <class image folder or Hub
# image set>` makes them from those images (hf_contrast.data.make_change_pairs): x_post is x_pre unchanged
# (noise only), with a patch erased, shifted, or replaced by an image of another class, with skewed
# frequencies 50/25/15/10 %; test pairs come from the held-out images. A dataset that already holds pairs
# (columns --pre_column, --post_column and --label_column; a test split, else 20 % is held out) is used as is.
# Reports the trainer's evaluation of the held-out pairs: the pair classifier's `accuracy` and `macro_f1`
# (LOCAL's metrics), the embedding metrics of z, and per-class recall. (No frozen-feature probe: a pair is
# no single input.)
#
# Launch:
#   one CPU or GPU   python examples/run_local.py [--contrastive supcon] [--dataset <image folder>]
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_local.py --gather_distributed
# Resuming: a checkpoint in --output_dir is picked up; --overwrite_output_dir starts from scratch instead.
# Writes to --output_dir (default outputs/local-<contrastive>): the encoder and its model card,
# local_objective.pt (the pair classifier: it belongs to the objective, not the encoder), train_results.json,
# eval_results.json, all_results.json, trainer_state.json, embeddings.png (the pair representations z),
# loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import datasets
import torch
import transformers
from torch.utils.data import DataLoader
from transformers.trainer_utils import set_seed

from hf_contrast.data import defer_image_decoding, load_image_splits, make_change_pairs
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
    "output_dir": "outputs/local-{contrastive}",
    "max_steps": 300,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 128,
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
    """What to train and on which pairs (α, β, temperature, contrastive: the objective's config flags)."""

    method: str = field(default="local", metadata={"help": "A registered paired-image objective (local)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model with stage feature maps."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    small_image_stem: bool | None = small_image_stem_field()
    dataset: str | None = field(
        default=None,
        metadata={
            "help": (
                "A class image folder / Hub image set (pairs are made from it) or a paired dataset; "
                "default: the digits."
            )
        },
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "Name of the data in the model card (default: the folder name or Hub id)."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Build pairs from this many training images."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Build test pairs from this many test images."}
    )
    projection_plot: Literal["pca", "tsne"] = field(
        default="tsne", metadata={"help": "2-D projection of the pair representations: pca or tsne."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from scratch even if --output_dir holds a checkpoint or an earlier run."},
    )


def load_pairs(
    script: ScriptArguments, training_args: ContrastiveTrainingArguments, config: object
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Train and test ``(pre, post, label)`` pairs: a paired dataset as is, or change pairs of labelled images."""
    columns: list[str] = []
    if script.dataset is not None:
        try:
            loaded = datasets.load_dataset(script.dataset)
        except (ConnectionError, OSError, ValueError) as error:
            raise SystemExit(
                f"Could not load `{script.dataset}` ({type(error).__name__}: {error}). Offline, pass a local class "
                "image folder (one sub-folder per class) or paired data `datasets.load_dataset` can read, or drop "
                "--dataset for change pairs of the embedded digits."
            ) from error
        columns = next(iter(loaded.values())).column_names
    if config.pre_column in columns and config.post_column in columns:  # already pairs
        if "test" not in loaded:
            loaded = loaded["train"].train_test_split(
                test_size=0.2, seed=training_args.seed, stratify_by_column=training_args.label_column
            )
        pairs = [
            defer_image_decoding(defer_image_decoding(loaded[s], config.pre_column), config.post_column)
            for s in ("train", "test")
        ]
        return pairs[0], pairs[1]
    images = load_image_splits(  # labelled images (an image folder, a Hub image set, the digits) -> change pairs
        script.dataset, image_column=training_args.image_column, label_column=training_args.label_column,
        image_size=training_args.image_size or 32, max_train_samples=script.max_train_samples,
        max_eval_samples=script.max_eval_samples, seed=training_args.seed,
        dataset_name=script.dataset_name,
    )  # fmt: skip
    training_args.image_column, training_args.label_column = "image", "label"  # the loader renames the chosen columns
    options = dict(
        image_column=training_args.image_column, label_column=training_args.label_column,
        on_bad_image=training_args.on_bad_image,
    )  # fmt: skip
    train = make_change_pairs(images["train"], seed=training_args.seed, **options)
    test = make_change_pairs(images["test"], seed=training_args.seed + 1, **options)
    if (config.pre_column, config.post_column) != ("image_pre", "image_post"):
        renames = {"image_pre": config.pre_column, "image_post": config.post_column}
        train, test = train.rename_columns(renames), test.rename_columns(renames)
    return train, test


def main() -> None:
    script, training_args, config = parse_args_with_objective(
        (ScriptArguments, ContrastiveTrainingArguments), method="local", defaults=DEFAULTS
    )
    if training_args.output_dir == DEFAULTS["output_dir"]:
        training_args.output_dir = DEFAULTS["output_dir"].format(contrastive=config.contrastive)
    setup_logging(training_args, __name__)
    check_image_backbone(script.model)  # a timm model, said before any data is read
    check_sample_caps(script)  # before any data is read
    check_script_phases()  # --do_train false / --do_eval false / --do_predict: not what it does
    last_checkpoint = detect_last_checkpoint(training_args, script.overwrite_output_dir)
    if (finished := finished_run(training_args, last_checkpoint, script.method)) is not None:
        logger.warning(finished)  # run again: nothing to do, nothing changed
        return
    set_seed(training_args.seed)

    train_dataset, eval_dataset = load_pairs(script, training_args, config)
    label = training_args.label_column
    class_names = train_dataset.features[label].names
    counts = Counter(train_dataset[label])

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
    notice_small_image_stem(
        encoder, script.small_image_stem, training_args.image_size, train_dataset, config.pre_column
    )
    objective = get_objective(script.method)(config)
    trainer = ContrastiveTrainer(
        model=encoder, args=training_args, objective=objective, train_dataset=train_dataset, eval_dataset=eval_dataset
    )
    logger.info(
        f"Training {script.method} ({config.contrastive}) on {len(train_dataset)} pairs of "
        f"{script.dataset or 'the embedded digits'} "
        f"({', '.join(f'{class_names[c]}: {n}' for c, n in sorted(counts.items()))}), "
        f"batches of {training_args.per_device_train_batch_size} pairs."
    )

    # ---- training ----
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and last_checkpoint is not None:
        checkpoint = True  # the newest *complete* checkpoint (hf_contrast checks it, and falls back with a warning)
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()  # the encoder and its model card
    if (
        trainer.is_world_process_zero()
    ):  # the pair classifier belongs to the objective: its weights next to the encoder
        torch.save(objective.state_dict(), os.path.join(training_args.output_dir, "local_objective.pt"))
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    # ---- evaluation: the trainer's metrics of the held-out pairs, and the recall of each kind of change ----
    metrics = evaluate_final(trainer)  # the saved weights' evaluation, logged at their step (last or best)
    metrics["eval_samples"] = len(eval_dataset)
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    loader = DataLoader(
        eval_dataset, batch_size=training_args.per_device_eval_batch_size, collate_fn=trainer.eval_data_collator
    )
    logits, z, labels = [], [], []
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(training_args.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            logits.append(objective.classify(model, batch, trainer.views).cpu())
            z.append(objective.eval_embeddings(model, batch, trainer.views)[0].cpu())
            labels.append(batch["labels"].cpu())
    predicted, z, labels = torch.cat(logits).argmax(dim=1), torch.cat(z), torch.cat(labels)
    metrics["eval_majority_class_accuracy"] = float((labels == max(counts, key=counts.get)).double().mean())
    for c, name in enumerate(class_names):  # per-class recall: where the rare classes stand
        if (labels == c).any():
            metrics[f"eval_recall_{name}"] = float((predicted[labels == c] == c).double().mean())
    own = [key for key in metrics if key.startswith(("eval_recall_", "eval_majority_class_"))]
    model.model_card_data.add_metrics({key: metrics[key] for key in own})  # in the card too
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)

    if trainer.is_world_process_zero():  # the pictures
        save_training_plots(
            training_args.output_dir, f"{script.method} ({config.contrastive})", log_history=trainer.state.log_history,
            z=z, labels=labels, class_names=class_names, projection=script.projection_plot, seed=training_args.seed,
        )  # fmt: skip

    # ---- model card and the Hub ----
    kwargs: dict[str, Any] = {"tags": [script.method, config.contrastive]}  # the data's names: the loaders'

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
