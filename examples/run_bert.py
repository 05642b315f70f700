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
# An STS evaluator on scored pairs (--sts_file, default the shipped demo pairs) runs at every evaluation:
# with the defaults the checkpoint of best Spearman (`eval_sts_spearman`) is the one kept and saved.
#
# Data: --dataset is a Hub id or a local CSV / TSV / JSON / JSONL / parquet file (columns --text_column,
# --text_pair_column, --label_column); default: the 240 template sentences shipped with hf_contrast (a demo,
# not a benchmark). --sts_file is a Hub id or a local file of scored pairs (--sts_sentence1_column, …).
#
# Launch:
#   python examples/run_bert.py --model sentence-transformers/all-MiniLM-L6-v2        (from the Hub)
#   python examples/run_bert.py --model /path/to/local/model   (offline: a save_pretrained / sentence-transformers dir)
#   accelerate launch --multi_gpu --num_processes 4 examples/run_bert.py --method care --gather_distributed
# Writes to --output_dir (default outputs/bert-<method>): the encoder with its tokenizer and model card
# (trainer.save_model), results.json, embeddings.png, augmentation_cosines.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from _common import augmented_embeddings, class_names, final_evaluation, parse_args, save_plots, write_results
from hf_contrast.views import ChunkedTextAugmentation
from hf_contrast.data import SENTENCE_PAIRS_PATH, load_sts_pairs, load_text_dataset
from hf_contrast.evaluation import (
    EquivarianceEvaluator,
    ProbeEvaluator,
    SequentialEvaluator,
    STSEvaluator,
    balanced_split,
    encode_dataset,
)
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.training import ContrastiveTrainer

DEFAULTS = {
    "output_dir": "outputs/bert-{method}",
    "max_steps": 60,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "learning_rate": 3e-5,
    "temperature": 0.05,  # SimCSE's; also CARE's InfoNCE and align_uniform's SimCSE term on sentences
    "n_splits": 4,  # CARE: chunks of 8 sentences share a token edit
    "text_column": "sentence1",  # the shipped demo sentences
    "max_length": 64,
    "eval_strategy": "steps",
    "eval_steps": 20,
    "save_strategy": "steps",
    "save_steps": 20,
    "save_total_limit": 2,
    "load_best_model_at_end": True,
    "metric_for_best_model": "eval_sts_spearman",
}


@dataclass
class ScriptArguments:
    """Which encoder, method and data (columns and training hyperparameters: the other flags)."""

    method: str = field(default="simclr", metadata={"help": "simclr (SimCSE), align_uniform, care, or any registered objective."})
    model: str = field(
        default="sentence-transformers/all-MiniLM-L6-v2",
        metadata={"help": "Hub id or local directory of a BERT-style (or sentence-transformers) encoder."},
    )
    pooling: str | None = field(default=None, metadata={"help": "'mean' or 'cls'; default: the model's own (sentence-transformers) or mean."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    task_head: bool = field(default=False, metadata={"help": "EquiBERT: a classifier on --label_column whose cross-entropy joins the loss."})
    dataset: str | None = field(default=None, metadata={"help": "Hub id or local CSV/TSV/JSON/JSONL/parquet; default: the shipped sentences."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Held-out fraction when --dataset has no validation/test split."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a seeded subset of this many rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a seeded subset of this many rows."})
    sts_file: str | None = field(default=None, metadata={"help": "Scored pairs (Hub id or local file); default: the shipped pairs."})
    sts_split: str = field(default="train", metadata={"help": "Split of --sts_file (a local file is 'train')."})
    sts_sentence1_column: str = field(default="sentence1", metadata={"help": "First sentence column of --sts_file."})
    sts_sentence2_column: str = field(default="sentence2", metadata={"help": "Second sentence column of --sts_file."})
    sts_score_column: str = field(default="score", metadata={"help": "Gold score column of --sts_file."})
    num_augmentations: int = field(default=8, metadata={"help": "Sampled token edits for the Wahba error / cosine histogram."})
    projection_plot: str = field(default="pca", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})


def load_encoder(script: ScriptArguments, num_labels: int) -> ContrastiveEncoder:
    """The pretrained text backbone + a fresh projection head; a clear message when the Hub is out of reach."""
    options = {"projection_dim": script.projection_dim, "num_labels": num_labels}
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


def main() -> None:
    script, args, config = parse_args(ScriptArguments, DEFAULTS, method="simclr")
    # ---- data: training sentences (+ pairs, + labels), a held-out split, scored pairs for STS ----
    source = script.dataset or SENTENCE_PAIRS_PATH
    columns = dict(split=None, text_column=args.text_column, text_pair_column=args.text_pair_column)
    try:  # with labels when the data has them (probes; the task head needs them)
        data = load_text_dataset(source, label_column=args.label_column, **columns)
    except ValueError as error:
        if script.task_head or f"`label_column`={args.label_column!r} is not a column" not in str(error):
            raise
        data = load_text_dataset(source, **columns)
    # the loader names the columns `text`, `text_pair`, `label` (hf_contrast.data.columns): the trainer reads those
    pair_source = args.text_pair_column
    args.text_column, args.label_column = "text", "label"
    if args.text_pair_column is not None:
        args.text_pair_column = "text_pair"
    train = data["train"]
    held_out = next((data[s] for s in ("validation", "test") if s in data), None)
    if held_out is None:  # seeded split (stratified when labelled)
        n = len(train)
        labels = list(train[args.label_column]) if args.label_column in train.column_names else [0] * n
        train_rows, test_rows = balanced_split(labels, script.eval_fraction, args.seed)
        train, held_out = train.select(train_rows.tolist()), train.select(test_rows.tolist())
    for name, limit in (("train", script.max_train_samples), ("held_out", script.max_eval_samples)):
        part = train if name == "train" else held_out
        if limit is not None and limit < len(part):
            part = part.shuffle(seed=args.seed).select(range(limit))
            train, held_out = (part, held_out) if name == "train" else (train, part)
    has_labels = args.label_column in train.column_names
    names = class_names(train, args.label_column) if has_labels else None
    if script.sts_file is None:
        sts_pairs = load_sts_pairs(SENTENCE_PAIRS_PATH).train_test_split(test_size=0.25, seed=args.seed)["test"]
    else:
        sts_pairs = load_sts_pairs(
            script.sts_file, script.sts_sentence1_column, script.sts_sentence2_column, script.sts_score_column,
            split=script.sts_split,
        )

    torch.manual_seed(args.seed)
    num_labels = 0
    if script.task_head:  # EquiBERT: one logit per class of the label column
        feature = train.features[args.label_column]
        num_labels = feature.num_classes if hasattr(feature, "num_classes") else max(train[args.label_column]) + 1
    encoder = load_encoder(script, num_labels)
    sts = STSEvaluator.from_dataset(sts_pairs, batch_size=args.per_device_eval_batch_size, max_length=args.max_length)
    encode = dict(input_column=args.text_column, label_column=args.label_column if has_labels else None,
                  batch_size=args.per_device_eval_batch_size, max_length=args.max_length)  # fmt: skip
    evaluator = sts
    if has_labels:  # + linear probe and kNN fitted on the training sentences, scored on the held-out ones
        probe = ProbeEvaluator(
            train, held_out, knn_k=min(args.knn_k, len(train)), knn_temperature=args.knn_temperature, seed=args.seed,
            progress=False, **encode,
        )
        evaluator = SequentialEvaluator([sts, probe])  # the primary metric (checkpoint selection): STS
    trainer = ContrastiveTrainer(
        model=encoder,
        args=args,
        objective=get_objective(script.method)(config),
        train_dataset=train,
        eval_dataset=held_out,
        evaluator=evaluator,
    )
    spearman_before = sts(encoder)["sts_spearman"] if trainer.is_world_process_zero() else float("nan")
    if trainer.is_world_process_zero():
        pairs = f" paired with `{pair_source}`" if pair_source else ""
        print(
            f"Fine-tuning {script.model} with {script.method}{' + task head' if script.task_head else ''} on "
            f"{len(train)} sentences{pairs} ({args.max_steps} steps of {args.per_device_train_batch_size}); STS Spearman "
            f"on {len(sts_pairs)} pairs before training: {spearman_before:.4f}"
        )
    trainer.train()  # with load_best_model_at_end the best `eval_sts_spearman` checkpoint is reloaded
    results = final_evaluation(trainer)  # the trainer's evaluation (STS, probes, alignment, …) of the final encoder
    trainer.save_model()  # encoder + tokenizer + model card, on the main process

    if not trainer.is_world_process_zero():  # the main process evaluates and writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    test_z, test_y = encode_dataset(encoder, held_out, **encode)  # for the picture
    # Equivariance under token edits: each sampled edit (delete / insert / mask at one relative position) hits every sentence.
    sentences = list(held_out[args.text_column][:256])
    batch = dict(encoder.tokenizer(sentences, padding=True, truncation=True, max_length=args.max_length, return_tensors="pt"))
    edit = ChunkedTextAugmentation.from_tokenizer(encoder.tokenizer, 1)
    equivariance = EquivarianceEvaluator(
        batch, lambda inputs: edit(inputs)[0], augment_key=None, num_augmentations=script.num_augmentations, seed=args.seed
    )
    spearman_after = results["sts_spearman"]
    if spearman_after < spearman_before:
        print(
            f"WARNING: the fine-tuned model's STS Spearman ({spearman_after:.4f}) is below the starting model's "
            f"({spearman_before:.4f}): {script.method} did not help on these pairs; keep using {script.model} or try "
            "supervised pairs (`--text_pair_column`), a lower learning rate or fewer steps."
        )
    results |= {
        "sts_spearman_before_training": spearman_before,
        **equivariance(encoder),
        "train_steps": trainer.state.global_step,
        "best_step": trainer.state.best_global_step,
    }
    write_results(args.output_dir, script.method, {k: v for k, v in results.items() if v is not None})
    f, f_a = augmented_embeddings(encoder, equivariance)
    save_plots(
        args.output_dir, script.method, trainer.state.log_history, z=test_z, labels=test_y, names=names, f=f, f_a=f_a,
        projection=script.projection_plot, seed=args.seed,
    )
    if args.push_to_hub:
        print(f"Pushed to the Hub: {trainer.push_to_hub()}")


if __name__ == "__main__":
    main()
