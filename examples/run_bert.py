# run_bert.py — fine-tune a BERT-style sentence encoder with alignment/uniformity, SimCSE or CARE.
#
# Methods (--method):
#   align_uniform  Wang & Isola's alignment + uniformity on two dropout views of each sentence
#                  (https://arxiv.org/abs/2005.10242); with --task_head, a linear classifier on the
#                  sentence embedding adds its cross-entropy on `label` (the EquiBERT recipe).
#   simcse         InfoNCE between two dropout views (https://arxiv.org/abs/2104.08821), τ = 0.05.
#   care           SimCSE + λ·L_equi on chunk-shared token edits: every chunk of --n_splits sentences
#                  gets the same deletion / insertion / mask at the same relative position.
# Evaluates the STS Spearman correlation between cos(f(s1), f(s2)) and the gold scores of the shipped
# sentence pairs (240 pairs over 4 topics; small demo data, not a benchmark), before and after training.
#
# Launch:
#   python examples/run_bert.py                              (downloads bert-base-uncased from the Hub)
#   python examples/run_bert.py --model_name_or_path /path/to/local/bert   (offline: a save_pretrained dir)
#   accelerate launch --multi_gpu --num_processes 4 examples/run_bert.py --method care --gather_distributed
# Writes to --output_dir (default outputs/bert-<method>): the encoder with its tokenizer, README.md,
# results.json, embeddings.png, augmentation_cosines.png, loss_curves.png.
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from datasets import Dataset

from _common import encode_texts, equivariance_metrics, finish, parse_arguments, sampled_text_augmentations
from hf_contrast.data import TOPIC_NAMES, load_sentence_pairs
from hf_contrast.metrics import knn_accuracy, sts_spearman, uniformity
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.training import AlignUniformTrainer, CARETrainer, ContrastiveTrainer, ContrastiveTrainingArguments, SimCLRTrainer

METHODS = ("align_uniform", "simcse", "care")
DEFAULTS = {
    "output_dir": "outputs/bert-{method}",
    "max_steps": 60,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "learning_rate": 3e-5,
    "temperature": 0.05,  # SimCSE's; also CARE's InfoNCE on sentences
    "n_splits": 4,  # CARE: chunks of 8 sentences share a token edit
    "care_weight": 0.01,
    "text_column": "sentence1",
    "max_length": 64,
    "dataloader_drop_last": True,
}


@dataclass
class ModelArguments:
    """Which encoder and method (training hyperparameters are ContrastiveTrainingArguments)."""

    method: str = field(default="align_uniform", metadata={"help": f"One of {METHODS}."})
    model_name_or_path: str = field(
        default="bert-base-uncased",
        metadata={"help": "Hub id or local directory (config.json, weights, tokenizer files) of a BERT-style encoder."},
    )
    pooling: str = field(default="mean", metadata={"help": "Sentence embedding: 'mean' over tokens or 'cls'."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    task_head: bool = field(
        default=False,
        metadata={"help": "align_uniform only: add a topic classifier whose cross-entropy (× --task_loss_weight) joins the loss."},
    )
    num_augmentations: int = field(default=8, metadata={"help": "Sampled token edits for the cosine histogram / Wahba error."})
    projection_plot: str = field(default="pca", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})


def load_encoder(model_args: ModelArguments) -> ContrastiveEncoder:
    """The pretrained text backbone + a fresh projection head; a clear message when the Hub is out of reach."""
    options = {"projection_dim": model_args.projection_dim, "pooling": model_args.pooling}
    if model_args.task_head:
        options["num_labels"] = len(TOPIC_NAMES)
    try:
        return ContrastiveEncoder.from_backbone(model_args.model_name_or_path, pretrained=True, **options)
    except HubUnavailableError as error:
        raise SystemExit(
            f"Could not load `{model_args.model_name_or_path}`: the Hugging Face Hub is not reachable from here.\n"
            "Point --model_name_or_path at a local copy instead: a directory holding config.json, the weights "
            "(model.safetensors) and the tokenizer files, e.g. made on a connected machine with\n"
            "    AutoModel.from_pretrained('bert-base-uncased').save_pretrained('bert-local')\n"
            "    AutoTokenizer.from_pretrained('bert-base-uncased').save_pretrained('bert-local')\n"
            "or set HF_HUB_OFFLINE=1 with the model already in the Hugging Face cache.\n"
            f"({error})"
        ) from error


def build_trainer(
    model_args: ModelArguments, args: ContrastiveTrainingArguments, encoder: ContrastiveEncoder, train: Dataset, test: Dataset
) -> ContrastiveTrainer:
    """AlignUniformTrainer, SimCLRTrainer (SimCSE: same sentence twice, dropout views) or CARETrainer."""
    common = dict(model=encoder, args=args, train_dataset=train, eval_dataset=test, processing_class=encoder.tokenizer)
    if model_args.method == "align_uniform":
        return AlignUniformTrainer(**common)
    if model_args.method == "simcse":
        return SimCLRTrainer(loss="info_nce", **common)
    return CARETrainer(method="care", **common)


def sts(encoder: ContrastiveEncoder, pairs: Dataset, max_length: int) -> float:
    """Spearman correlation of cos(f(s1), f(s2)) with the gold scores, on the sentence embeddings."""
    a = encode_texts(encoder, pairs["sentence1"], max_length=max_length)["embeddings"]
    b = encode_texts(encoder, pairs["sentence2"], max_length=max_length)["embeddings"]
    return sts_spearman(a, b, torch.tensor(pairs["score"]))


def main() -> None:
    model_args, args = parse_arguments(ModelArguments, DEFAULTS)
    if model_args.method not in METHODS:
        raise SystemExit(f"--method must be one of {METHODS}, got {model_args.method!r}.")
    if model_args.task_head and model_args.method != "align_uniform":
        raise SystemExit("--task_head is the EquiBERT recipe and goes with --method align_uniform.")
    data = load_sentence_pairs(seed=args.seed)
    train, test = data["train"], data["test"]
    torch.manual_seed(args.seed)
    encoder = load_encoder(model_args)
    if encoder.tokenizer is None:
        raise SystemExit(f"`{model_args.model_name_or_path}` has no tokenizer files; save the tokenizer into that directory.")
    trainer = build_trainer(model_args, args, encoder, train, test)
    spearman_before = sts(encoder, test, args.max_length) if trainer.is_world_process_zero() else float("nan")
    if trainer.is_world_process_zero():
        print(
            f"Fine-tuning {model_args.model_name_or_path} with {model_args.method} on {len(train)} sentences "
            f"({args.max_steps} steps of {args.per_device_train_batch_size}); test STS Spearman before: {spearman_before:.4f}"
        )
    trainer.train()

    if not trainer.is_world_process_zero():  # the main process evaluates and writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    train_z = encode_texts(encoder, train["sentence1"], max_length=args.max_length)["embeddings"]
    test_z = encode_texts(encoder, test["sentence1"], max_length=args.max_length)["embeddings"]
    train_y, test_y = torch.tensor(train["label"]), torch.tensor(test["label"])
    f, f_a = sampled_text_augmentations(encoder, test["sentence1"], model_args.num_augmentations, seed=args.seed, max_length=args.max_length)
    results = {
        "sts_spearman": sts(encoder, test, args.max_length),
        "sts_spearman_before_training": spearman_before,
        "topic_knn_accuracy": knn_accuracy(train_z, train_y, test_z, test_y, k=min(20, len(train_z))),
        "uniformity": uniformity(test_z),
        **equivariance_metrics(f, f_a),
        "train_steps": trainer.state.global_step,
    }
    title = {"align_uniform": "Alignment-Uniformity" + (" + task (EquiBERT)" if model_args.task_head else ""), "simcse": "SimCSE", "care": "CARE"}
    finish(
        trainer,
        results,
        title=title[model_args.method],
        datasets=["hf_contrast sentence_pairs.tsv"],
        training_data=f"{len(train)} English sentences (4 topics) shipped with hf_contrast; dropout views.",
        plots={"z": test_z, "labels": test_y, "f": f, "f_a": f_a, "projection": model_args.projection_plot},
    )


if __name__ == "__main__":
    main()
