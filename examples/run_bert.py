#!/usr/bin/env python
# run_bert.py — fine-tune a BERT-style sentence encoder: SimCSE, alignment/uniformity, CARE, EquiBERT, pairs.
#
# Three uses, one script (the objective comes from the registry, `--method X --help` lists its flags):
#   unsupervised      --method simclr (SimCSE, https://arxiv.org/abs/2104.08821: InfoNCE between two dropout
#                     views, τ = 0.05) | align_uniform (Wang & Isola, https://arxiv.org/abs/2005.10242) |
#                     care (SimCSE + λ·L_equi on chunk-shared token edits), on single sentences (--text_column);
#   EquiBERT          --method align_uniform --task_head: a linear classifier on the sentence embedding adds
#                     its cross-entropy on --label_column (a labelled classification set);
#   supervised pairs  --text_pair_column <column>: the second view is the paired sentence (a paraphrase,
#                     an entailment hypothesis) instead of a dropout copy.
# An STS evaluator on scored pairs (--sts_file, default the shipped demo pairs; sentence-transformers'
# EmbeddingSimilarityEvaluator) runs at every evaluation on at most --max_sts_pairs pairs (a seeded sample;
# 0: all): with the defaults the checkpoint of best Spearman (`eval_sts_spearman`) is the one kept and saved.
# That holds while evaluations and checkpoints share one schedule; with other --eval_strategy / --save_strategy
# flags the last model is saved instead, and the start-up log says so (`--load_best_model_at_end true` insists).
#
# Data: --dataset is a Hub id or a local CSV / TSV / JSON / JSONL / parquet file (columns --text_column,
# --text_pair_column, --label_column); default: the 240 template sentences shipped with hf_contrast (a demo,
# not a benchmark). --sts_file is a Hub id or a local file of scored pairs (--sts_sentence1_column, …).
#
# Launch:
#   python examples/run_bert.py --model sentence-transformers/all-MiniLM-L6-v2        (from the Hub)
#   python examples/run_bert.py --model /path/to/local/model   (offline: a save_pretrained / sentence-transformers dir)
#   accelerate launch --multi_gpu --num_processes 4 examples/run_bert.py --method care --gather_distributed
# Resuming: a checkpoint in --output_dir is picked up; --overwrite_output_dir starts from scratch instead.
# Writes to --output_dir (default outputs/bert-<method>): the encoder with its tokenizer and model card,
# train_results.json, eval_results.json, all_results.json, trainer_state.json, embeddings.png,
# augmentation_cosines.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import datasets
import torch
import transformers
from transformers.trainer_utils import set_seed

from hf_contrast.data import SENTENCE_PAIRS_PATH, hold_out, load_sts_pairs, load_text_dataset, take_subset
from hf_contrast.errors import InputError
from hf_contrast.evaluation import (
    EquivarianceEvaluator,
    ProbeEvaluator,
    SequentialEvaluator,
    STSEvaluator,
    TaskHeadEvaluator,
    encode_dataset,
)
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.plots import save_training_plots
from hf_contrast.training import (
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    check_sample_caps,
    check_script_phases,
    check_task_head,
    check_text_backbone,
    detect_last_checkpoint,
    evaluate_final,
    finished_run,
    given_arguments,
    parse_args_with_objective,
    run_main,
    setup_logging,
    training_length,
)
from hf_contrast.views import ChunkedTextAugmentation

logger = transformers.utils.logging.get_logger(__name__)

# Defaults chosen so that a bare run finishes in a few minutes on a 2-core CPU; every flag overrides them.
DEFAULTS = {
    "output_dir": "outputs/bert-{method}",
    "max_steps": 60,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "learning_rate": 3e-5,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,  # a float < 1 is a fraction of the total steps
    "temperature": 0.05,  # SimCSE's; also CARE's InfoNCE and align_uniform's SimCSE term on sentences
    "n_splits": 4,  # CARE: chunks of 8 sentences share a token edit
    "text_column": "sentence1",  # the shipped demo sentences
    "max_length": 64,
    "eval_strategy": "steps",
    "eval_steps": 20,
    "save_strategy": "steps",
    "save_steps": 20,
    "save_total_limit": 2,
    "metric_for_best_model": "eval_sts_spearman",  # and load_best_model_at_end where the schedules allow it (main)
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
    """Which encoder, method and data (columns and training hyperparameters: the other flags)."""

    method: str = field(
        default="simclr", metadata={"help": "simclr (SimCSE), align_uniform, care, or any registered objective."}
    )
    model: str = field(
        default="sentence-transformers/all-MiniLM-L6-v2",
        metadata={"help": "Hub id or local directory of a BERT-style (or sentence-transformers) encoder."},
    )
    pooling: str | None = field(
        default=None,
        metadata={"help": "'mean', 'cls' or 'max'; default: the model's own (sentence-transformers) or mean."},
    )
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    task_head: bool = field(
        default=False,
        metadata={"help": "EquiBERT: a classifier on --label_column whose cross-entropy joins the loss."},
    )
    dataset: str | None = field(
        default=None, metadata={"help": "Hub id or local CSV/TSV/JSON/JSONL/parquet; default: the shipped sentences."}
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "Name of the data in the model card (default: the file name or Hub id)."}
    )
    eval_fraction: float = field(
        default=0.1, metadata={"help": "Held-out fraction when --dataset has no validation/test split."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on a seeded subset of this many rows."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on a seeded subset of this many held-out rows."}
    )
    sts_file: str | None = field(
        default=None, metadata={"help": "Scored pairs (Hub id or local file); default: the shipped pairs."}
    )
    sts_split: str = field(default="train", metadata={"help": "Split of --sts_file (a local file is 'train')."})
    sts_sentence1_column: str = field(default="sentence1", metadata={"help": "First sentence column of --sts_file."})
    sts_sentence2_column: str = field(default="sentence2", metadata={"help": "Second sentence column of --sts_file."})
    sts_score_column: str = field(default="score", metadata={"help": "Gold score column of --sts_file."})
    max_sts_pairs: int = field(
        default=1000,
        metadata={
            "help": "Score STS on a seeded sample of at most this many pairs at every evaluation (0: all pairs)."
        },
    )
    num_augmentations: int = field(
        default=8, metadata={"help": "Sampled token edits for the Wahba error / cosine histogram."}
    )
    projection_plot: Literal["pca", "tsne"] = field(
        default="pca", metadata={"help": "2-D projection of the test embeddings: pca or tsne."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from scratch even if --output_dir holds a checkpoint or an earlier run."},
    )


def load_encoder(script: ScriptArguments, num_labels: int, class_names: list[str] | None) -> ContrastiveEncoder:
    """The pretrained text backbone + a fresh projection head (+ a task head of ``num_labels`` classes, saved with
    their names when the label column has them); a clear message when the Hub is out of reach."""
    options: dict[str, Any] = {"projection_dim": script.projection_dim, "num_labels": num_labels}
    if num_labels and class_names:
        options["id2label"] = dict(enumerate(class_names))
    if script.pooling is not None:
        options["pooling"] = script.pooling
    try:
        return ContrastiveEncoder.from_backbone(script.model, pretrained=True, **options)
    except HubUnavailableError as error:
        raise SystemExit(
            f"Could not load `{script.model}`: the Hugging Face Hub is not reachable from here.\n"
            "Point --model at a local copy instead: a directory holding config.json, the weights and the tokenizer "
            "files (a `save_pretrained` or sentence-transformers folder), or set HF_HUB_OFFLINE=1 with the model "
            f"already in the Hugging Face cache.\n({error})"
        ) from error


#: ``load_sts_pairs``'s arguments and the flags that set them.
STS_FLAGS = {
    "path": "--sts_file",
    "sentence1_column": "--sts_sentence1_column",
    "sentence2_column": "--sts_sentence2_column",
    "score_column": "--sts_score_column",
    "split": "--sts_split",
}


def load_sts(script: ScriptArguments, seed: int) -> datasets.Dataset:
    """The scored pairs of the STS evaluation, a seeded sample of at most ``--max_sts_pairs``."""
    if script.max_sts_pairs < 0:
        raise InputError(f"--max_sts_pairs must be >= 0 (0: all pairs), got {script.max_sts_pairs}.")
    if script.sts_file is None:
        pairs = load_sts_pairs(SENTENCE_PAIRS_PATH).train_test_split(test_size=0.25, seed=seed)["test"]
    else:
        try:
            pairs = load_sts_pairs(
                script.sts_file, script.sts_sentence1_column, script.sts_sentence2_column, script.sts_score_column,
                split=script.sts_split,
            )  # fmt: skip
        except InputError as error:  # the loader names its arguments; the user typed the flags
            message = str(error)
            for name, flag in STS_FLAGS.items():
                message = message.replace(f"`{name}=`", f"`{flag}`").replace(f"`{name}`", f"`{flag}`")
            raise InputError(message) from error
    total = len(pairs)
    if 0 < script.max_sts_pairs < total:  # the subset is noted on the pairs: the card says it beside the STS scores
        pairs = take_subset(pairs, script.max_sts_pairs, argument="max_sts_pairs", seed=seed)
        logger.info(
            f"STS on {len(pairs):,} of {total:,} pairs "
            f"(a seeded sample: --max_sts_pairs {script.max_sts_pairs}; 0 for all)."
        )
    else:
        logger.info(f"STS on all {total:,} pairs.")
    return pairs


def best_checkpoint_unavailable(args: ContrastiveTrainingArguments) -> str | None:
    """Why the Trainer cannot reload the best checkpoint with these schedules (``None``: it can). The judge is
    transformers itself: ``TrainingArguments(load_best_model_at_end=True)`` with the same schedule fields."""
    evaluate, save = str(args.eval_strategy.value), str(args.save_strategy.value)
    if evaluate == "no":
        return "there are no evaluations during training (`--eval_strategy no`)"
    schedule = {name: getattr(args, name) for name in ("eval_strategy", "save_strategy", "eval_steps", "save_steps")}
    try:
        transformers.TrainingArguments(
            output_dir=args.output_dir, use_cpu=True, load_best_model_at_end=True,
            metric_for_best_model=args.metric_for_best_model, **schedule,
        )  # fmt: skip
    except ValueError as error:  # transformers' reason; its ", but found" ends a line whose sequel the flags say
        reason = str(error).splitlines()[0].removesuffix(" but found").removesuffix(",")
        return (
            f"evaluations (`--eval_strategy {evaluate}`, `--eval_steps {args.eval_steps}`) do not all fall on "
            f"checkpoints (`--save_strategy {save}`, `--save_steps {args.save_steps}`): {reason}"
        )
    return None


def main() -> None:
    script, training_args, config = parse_args_with_objective(
        (ScriptArguments, ContrastiveTrainingArguments), method="simclr", defaults=DEFAULTS
    )
    if training_args.output_dir == DEFAULTS["output_dir"]:
        training_args.output_dir = DEFAULTS["output_dir"].format(method=script.method)
    setup_logging(training_args, __name__)
    if "load_best_model_at_end" not in given_arguments():  # the default: keep the best checkpoint where one exists
        why_not = best_checkpoint_unavailable(training_args)
        training_args.load_best_model_at_end = why_not is None
        if why_not and training_args.should_log:  # said once, by the main process
            logger.warning(
                f"The last model is saved, not the best `eval_sts_spearman` checkpoint: {why_not.rstrip('.')}."
            )
    check_sample_caps(script)  # before any data is read
    check_script_phases()  # --do_train false / --do_eval false / --do_predict: not what it does
    check_task_head(script.method, script.task_head)
    check_text_backbone(script.model)  # a timm name is an image model: said before any data or Hub request
    last_checkpoint = detect_last_checkpoint(training_args, script.overwrite_output_dir)
    if (finished := finished_run(training_args, last_checkpoint, script.method)) is not None:
        logger.warning(finished)  # run again: nothing to do, nothing changed
        return
    set_seed(training_args.seed)

    # ---- data: training sentences (+ pairs, + labels), a held-out split, scored pairs for STS ----
    source = script.dataset or SENTENCE_PAIRS_PATH
    columns = dict(
        split=None, text_column=training_args.text_column, text_pair_column=training_args.text_pair_column,
        dataset_name=script.dataset_name,
    )  # fmt: skip
    # with labels when the data has them (probes; the task head needs them); a --label_column given is required
    try:
        data = load_text_dataset(source, label_column=training_args.label_column, **columns)
    except ValueError as error:
        missing = f"`label_column`={training_args.label_column!r} is not a column" in str(error)
        if script.task_head or "label_column" in given_arguments() or not missing:
            raise
        data = load_text_dataset(source, **columns)
    # the loader renames the chosen columns to `text`, `text_pair`, `label` (hf_contrast.data.columns)
    pair_source = training_args.text_pair_column
    training_args.text_column, training_args.label_column = "text", "label"
    if training_args.text_pair_column is not None:
        training_args.text_pair_column = "text_pair"
    train_dataset = data["train"]
    has_labels = training_args.label_column in train_dataset.column_names
    eval_dataset = next((data[s] for s in ("validation", "test") if s in data), None)
    if eval_dataset is None:  # a seeded split (stratified when labelled), said at start-up and in the card
        train_dataset, eval_dataset = hold_out(
            train_dataset, script.eval_fraction, argument="eval_fraction", seed=training_args.seed,
            label_column=training_args.label_column if has_labels else None,
            name=script.dataset or "The shipped sentence pairs",
        )  # fmt: skip
    seed = training_args.seed  # a seeded random subset each, said in the card
    train_dataset = take_subset(train_dataset, script.max_train_samples, argument="max_train_samples", seed=seed)
    eval_dataset = take_subset(eval_dataset, script.max_eval_samples, argument="max_eval_samples", seed=seed)
    label_feature = train_dataset.features.get(training_args.label_column) if has_labels else None
    class_names = list(label_feature.names) if hasattr(label_feature, "names") else None
    sts_pairs = load_sts(script, training_args.seed)

    # ---- model, evaluators, trainer ----
    num_labels = 0
    if script.task_head:  # EquiBERT: one logit per class of the label column
        num_labels = (
            label_feature.num_classes
            if hasattr(label_feature, "num_classes")
            else max(train_dataset[training_args.label_column]) + 1
        )
    encoder = load_encoder(script, num_labels, class_names)
    sts = STSEvaluator.from_dataset(  # a bar while it encodes: the pairs can take minutes on a CPU (--max_sts_pairs 0)
        sts_pairs, batch_size=training_args.per_device_eval_batch_size, max_length=training_args.max_length,
        progress=not training_args.disable_tqdm,
    )  # fmt: skip
    encode = dict(
        input_column=training_args.text_column, label_column=training_args.label_column if has_labels else None,
        batch_size=training_args.per_device_eval_batch_size, max_length=training_args.max_length,
    )  # fmt: skip
    evaluator = sts
    if has_labels:  # + linear probe and kNN fitted on the training sentences, scored on the held-out ones
        probe = ProbeEvaluator(
            train_dataset, eval_dataset, knn_k=min(training_args.knn_k, len(train_dataset)),
            knn_temperature=training_args.knn_temperature, seed=training_args.seed, progress=False, **encode,
        )  # fmt: skip
        head = [TaskHeadEvaluator(eval_dataset, progress=False, **encode)] if script.task_head else []
        evaluator = SequentialEvaluator([sts, probe, *head])  # the primary metric (checkpoint selection): STS
    trainer = ContrastiveTrainer(
        model=encoder, args=training_args, objective=get_objective(script.method)(config),
        train_dataset=train_dataset, eval_dataset=eval_dataset, evaluator=evaluator,
    )  # fmt: skip
    logger.info(f"Scoring the starting model on {len(sts_pairs):,} STS pairs.")
    before = sts(encoder)
    spearman_before = before["sts_spearman"]
    encoder.model_card_data.set_metrics({f"eval_{key}": value for key, value in before.items()}, step=0)  # baseline
    pairs = f" paired with `{pair_source}`" if pair_source else ""
    logger.info(
        f"Fine-tuning {script.model} with {script.method}{' + task head' if script.task_head else ''} on "
        f"{len(train_dataset)} sentences{pairs} ({training_length(training_args)}, batches of "
        f"{training_args.per_device_train_batch_size}); STS Spearman on {len(sts_pairs):,} pairs before training: "
        f"{spearman_before:.4f}"
    )

    # ---- training: with load_best_model_at_end the best `eval_sts_spearman` checkpoint is reloaded ----
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and last_checkpoint is not None:
        checkpoint = True  # the newest *complete* checkpoint (hf_contrast checks it, and falls back with a warning)
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()  # the encoder, its tokenizer and model card
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    # ---- evaluation of the kept encoder (STS, probes, alignment, …) and its equivariance under token edits ----
    metrics = evaluate_final(trainer)  # the saved weights' evaluation, logged at their step (last or best)
    metrics["eval_samples"] = len(eval_dataset)
    metrics["eval_sts_pairs"] = len(sts_pairs)
    metrics["eval_sts_spearman_before_training"] = spearman_before
    if trainer.state.best_global_step is not None:  # None without evaluations during training (`--eval_strategy no`)
        metrics["eval_best_step"] = trainer.state.best_global_step
    model = trainer.accelerator.unwrap_model(trainer.model)
    # Each sampled edit (delete / insert / mask at one relative position) hits every sentence.
    sentences = list(eval_dataset[training_args.text_column][:256])
    batch = dict(
        model.tokenizer(
            sentences, padding=True, truncation=True, max_length=training_args.max_length, return_tensors="pt"
        )
    )
    edit = ChunkedTextAugmentation.from_tokenizer(model.tokenizer, 1)
    logger.info(f"Equivariance under token edits: {len(sentences)} sentences × {script.num_augmentations} edits.")
    equivariance = EquivarianceEvaluator(
        batch,
        lambda inputs: edit(inputs)[0],
        augment_key=None,
        num_augmentations=script.num_augmentations,
        seed=training_args.seed,
    )
    under_edits = {f"eval_{key}": value for key, value in equivariance(model).items()}
    metrics.update(under_edits)
    model.model_card_data.add_metrics(under_edits)  # in the card too
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    if metrics["eval_sts_spearman"] < spearman_before:
        logger.warning(
            f"The fine-tuned model's STS Spearman ({metrics['eval_sts_spearman']:.4f}) is below the starting model's "
            f"({spearman_before:.4f}): {script.method} did not help on these pairs; keep using {script.model} or try "
            + (
                "supervised pairs (`--text_pair_column`), "
                if pair_source is None
                else f"pairs whose `{pair_source}` means the same as the sentence (paraphrases, entailments), "
            )
            + "a lower learning rate or fewer steps."
        )

    if trainer.is_world_process_zero():  # the pictures
        logger.info(f"Encoding the {len(eval_dataset)} test sentences for the pictures.")
        test_z, test_y = encode_dataset(model, eval_dataset, progress=not training_args.disable_tqdm, **encode)
        model.eval()
        with torch.no_grad():
            f, f_a = equivariance.embeddings(model)
        save_training_plots(
            training_args.output_dir, script.method, log_history=trainer.state.log_history, z=test_z, labels=test_y,
            class_names=class_names, f=f, f_a=f_a, projection=script.projection_plot, seed=training_args.seed,
        )  # fmt: skip

    # ---- model card and the Hub ----
    kwargs: dict[str, Any] = {"tags": [script.method]}  # the data's names: the loaders' (`info.dataset_name`)
    if script.dataset and not os.path.exists(script.dataset):
        kwargs["dataset_tags"] = script.dataset
    if not os.path.isdir(script.model):
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
