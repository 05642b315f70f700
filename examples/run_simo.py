# run_simo.py — supervised SimO / AFCL: classes pulled together, class means pushed to orthogonality.
#
# SimO (https://arxiv.org/abs/2410.05233) trains on class-major batches of C classes × k samples
# (the AFCL sampler, C < half the classes) with the similarity–orthogonality loss on the raw
# (un-normalised) projections. With no arguments: a timm ResNet-18 from scratch on the embedded
# scikit-learn digits, C = 4 classes × k = 32 images per batch; reports the class-mean
# orthogonality of the test projections (mean |cos| between class means, 0 = orthogonal) and
# kNN / linear-probe accuracy.
#
# Launch:
#   one CPU or GPU   python examples/run_simo.py          (or: accelerate launch examples/run_simo.py)
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_simo.py
#                    (each process draws its own C × k batch; the sampler shards the batches)
# Options: --classes_per_batch, --samples_per_class (their product must be --per_device_train_batch_size),
#          --olean, --n_views 2, --model, --dataset, and every TrainingArguments flag.
# Writes to --output_dir (default outputs/simo): encoder, README.md, results.json, embeddings.png,
# augmentation_cosines.png, loss_curves.png.
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from _common import encode_splits, equivariance_metrics, finish, load_image_dataset, parse_arguments, sampled_augmentations
from _common import sized_image_encoder
from hf_contrast.metrics import class_orthogonality, effective_rank, knn_accuracy, linear_probe_accuracy
from hf_contrast.training import SimOTrainer

DEFAULTS = {
    "output_dir": "outputs/simo",
    "max_steps": 200,
    "classes_per_batch": 4,  # C < 10 / 2 classes per batch (the paper's stability fix)
    "samples_per_class": 32,
    "per_device_train_batch_size": 128,  # = C × k
    "per_device_eval_batch_size": 256,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "olean": 0.01,
    "image_size": 32,
}


@dataclass
class ModelArguments:
    """What to train and on which data (SimO hyperparameters are ContrastiveTrainingArguments)."""

    model: str = field(default="resnet18", metadata={"help": "Any timm model name."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=64, metadata={"help": "Output size of the projection head (>= the number of classes)."})
    dataset: str | None = field(default=None, metadata={"help": "Hub dataset id or local image folder; default: the digits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a random subset of this many rows (quick runs)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a random subset of this many rows."})
    num_probe_images: int = field(default=256, metadata={"help": "Test images for the augmentation-cosine histogram."})
    num_augmentations: int = field(default=8, metadata={"help": "Sampled augmentations for the histogram."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})


def main() -> None:
    model_args, args = parse_arguments(ModelArguments, DEFAULTS)
    size = args.image_size or 32
    data = load_image_dataset(
        model_args.dataset, size, args.seed, args.image_column, args.label_column,
        max_train_samples=model_args.max_train_samples, max_eval_samples=model_args.max_eval_samples,
    )
    torch.manual_seed(args.seed)
    # SimO works on raw embeddings: its orthogonality term needs them un-normalised.
    encoder = sized_image_encoder(
        model_args.model, model_args.pretrained, args.image_size, projection_dim=model_args.projection_dim, normalize_projections=False
    )
    trainer = SimOTrainer(model=encoder, args=args, train_dataset=data["train"], eval_dataset=data["test"])
    if trainer.is_world_process_zero():
        print(
            f"Training SimO/AFCL on {model_args.dataset or 'the embedded digits'} ({len(data['train'])} train images): "
            f"{args.max_steps} steps of {args.classes_per_batch} classes × {args.samples_per_class} images."
        )
    trainer.train()

    if not trainer.is_world_process_zero():  # the main process evaluates and writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    train, test = data["train"], data["test"]
    train_out, test_out, train_y, test_y = encode_splits(encoder, train, test, args)
    probe_images = test[args.image_column][: model_args.num_probe_images]
    f, f_a = sampled_augmentations(encoder, probe_images, model_args.num_augmentations, seed=args.seed)
    results = {
        "class_orthogonality": class_orthogonality(test_out["projections"], test_y),
        "class_orthogonality_embeddings": class_orthogonality(test_out["embeddings"], test_y),
        "knn_accuracy": knn_accuracy(train_out["projections"], train_y, test_out["projections"], test_y, k=20),
        "knn_accuracy_embeddings": knn_accuracy(train_out["embeddings"], train_y, test_out["embeddings"], test_y, k=20),
        "linear_probe_accuracy": linear_probe_accuracy(train_out["embeddings"], train_y, test_out["embeddings"], test_y),
        "effective_rank": effective_rank(test_out["projections"]),
        "augmentation_cosine_mean": equivariance_metrics(f, f_a)["augmentation_cosine_mean"],
        "train_steps": trainer.state.global_step,
    }
    finish(
        trainer,
        results,
        title="SimO",
        datasets=[model_args.dataset or "sklearn-digits"],
        training_data=f"{len(train)} labelled images, class-major AFCL batches of {args.classes_per_batch}×{args.samples_per_class}.",
        plots={"z": test_out["projections"], "labels": test_y, "f": f, "f_a": f_a, "projection": model_args.projection_plot},
    )


if __name__ == "__main__":
    main()
