# run_ocl.py — OCL vs SupCon on long-tailed data with small batches.
#
# OCL, the orthonormal contrastive loss of LOCAL (docs/methods.md §3), is SupCon where every negative
# enters the denominator through |cos|: classes are pushed to orthogonal directions instead of
# opposite ones, which matters when a small batch holds few classes and the classes are skewed.
# With no arguments: a timm ResNet-18 from scratch on a long-tailed version of the embedded digits
# (`--imbalance_ratio 10`: the largest class has 10× the images of the smallest), batches of 32
# images × 2 views; reports accuracy and macro-F1 of a linear probe and of a kNN classifier on
# frozen features of the (balanced) test split. `--loss supcon` trains the SupCon baseline.
#
# Launch:
#   one CPU or GPU   python examples/run_ocl.py [--loss supcon]     (or: accelerate launch examples/run_ocl.py)
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_ocl.py --gather_distributed
#                    (--gather_distributed: anchors see the negatives of every process, as one big batch)
# Writes to --output_dir (default outputs/<loss>): encoder, README.md, results.json, embeddings.png,
# augmentation_cosines.png, loss_curves.png.
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from _common import accuracy_and_macro_f1, encode_splits, equivariance_metrics, finish, knn_predict, linear_probe_predict
from _common import load_image_dataset, parse_arguments, sampled_augmentations, sized_image_encoder
from hf_contrast.data import make_long_tailed
from hf_contrast.metrics import class_orthogonality
from hf_contrast.training import OCLTrainer, SupConTrainer

LOSSES = {"ocl": OCLTrainer, "supcon": SupConTrainer}
DEFAULTS = {
    "output_dir": "outputs/{loss}",
    "max_steps": 300,
    "per_device_train_batch_size": 32,  # small batches: few positives and few classes per batch
    "per_device_eval_batch_size": 256,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
}


@dataclass
class ModelArguments:
    """What to train and on which data (temperature, n_views… are ContrastiveTrainingArguments)."""

    loss: str = field(default="ocl", metadata={"help": f"One of {tuple(LOSSES)}."})
    imbalance_ratio: float = field(default=10.0, metadata={"help": "Largest / smallest class size of the training set (1: balanced)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model name."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    dataset: str | None = field(default=None, metadata={"help": "Hub dataset id or local image folder; default: the digits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a random subset of this many rows (quick runs)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a random subset of this many rows."})
    num_probe_images: int = field(default=256, metadata={"help": "Test images for the augmentation-cosine histogram."})
    num_augmentations: int = field(default=8, metadata={"help": "Sampled augmentations for the histogram."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})


def main() -> None:
    model_args, args = parse_arguments(ModelArguments, DEFAULTS)
    if model_args.loss not in LOSSES:
        raise SystemExit(f"--loss must be one of {tuple(LOSSES)}, got {model_args.loss!r}.")
    size = args.image_size or 32
    data = load_image_dataset(
        model_args.dataset, size, args.seed, args.image_column, args.label_column,
        max_train_samples=model_args.max_train_samples, max_eval_samples=model_args.max_eval_samples,
    )
    train = make_long_tailed(data["train"], model_args.imbalance_ratio, label_column=args.label_column, seed=args.seed)
    test = data["test"]
    torch.manual_seed(args.seed)
    encoder = sized_image_encoder(model_args.model, model_args.pretrained, args.image_size, projection_dim=model_args.projection_dim)
    trainer = LOSSES[model_args.loss](model=encoder, args=args, train_dataset=train, eval_dataset=test)
    counts = sorted(Counter(train[args.label_column]).values(), reverse=True)
    if trainer.is_world_process_zero():
        print(
            f"Training {model_args.loss} on a long-tailed {model_args.dataset or 'digits'} set (imbalance "
            f"{model_args.imbalance_ratio:g}: class sizes {counts}), batches of {args.per_device_train_batch_size}."
        )
    trainer.train()

    if not trainer.is_world_process_zero():  # the main process evaluates and writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    train_out, test_out, train_y, test_y = encode_splits(encoder, train, test, args)
    f, f_a = sampled_augmentations(encoder, test[args.image_column][: model_args.num_probe_images], model_args.num_augmentations, seed=args.seed)
    z_train, z_test = train_out["embeddings"], test_out["embeddings"]
    results = {
        **accuracy_and_macro_f1("linear_probe", test_y, linear_probe_predict(z_train, train_y, z_test, seed=args.seed)),
        **accuracy_and_macro_f1("knn", test_y, knn_predict(z_train, train_y, z_test)),
        "class_orthogonality": class_orthogonality(test_out["projections"], test_y),
        "augmentation_cosine_mean": equivariance_metrics(f, f_a)["augmentation_cosine_mean"],
        "imbalance_ratio": float(model_args.imbalance_ratio),
        "skipped_batches": trainer.skipped_batches,
        "train_steps": trainer.state.global_step,
    }
    title = {"ocl": "OCL", "supcon": "SupCon"}[model_args.loss]
    finish(
        trainer,
        results,
        title=title,
        datasets=[model_args.dataset or "sklearn-digits"],
        training_data=f"{len(train)} labelled images, long-tailed (imbalance ratio {model_args.imbalance_ratio:g}, class sizes {counts}).",
        plots={"z": z_test, "labels": test_y, "f": f, "f_a": f_a, "projection": model_args.projection_plot},
    )


if __name__ == "__main__":
    main()
