# run_local.py — LOCAL: classify pairs of images (pre, post) by the kind of change between them.
#
# LOCAL (latent orthonormal contrastive learning for paired images, docs/methods.md §3a) passes both
# images through one shared encoder and combines OCL on the normalised projection difference
# z = n(e_pre − e_post), β·OCL on a latent correlation embedding of the backbone's stage maps, and
# the class-weighted cross-entropy of a pair classifier, weighted by α (α decreases every epoch).
# `--loss supcon` gives the paper's L-SCL baseline. With no arguments the pairs come from the
# embedded digits: x_post is x_pre unchanged (noise only), with a patch erased, shifted, or replaced
# by another digit, with skewed frequencies 50/25/15/10 %. Reports accuracy and macro-F1 of the
# pair classifier on held-out pairs (built from the test digits).
#
# Launch:
#   one CPU or GPU   python examples/run_local.py [--loss supcon]   (or: accelerate launch examples/run_local.py)
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_local.py --gather_distributed
# Your own pairs: --dataset <Hub id or a folder readable by datasets.load_dataset> with columns
# image_pre, image_post, label (and a test split).
# Writes to --output_dir (default outputs/local-<loss>): encoder, README.md, results.json, embeddings.png
# (the pair representations z), augmentation_cosines.png, loss_curves.png.
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from datasets import Dataset

from _common import accuracy_and_macro_f1, equivariance_metrics, finish, parse_arguments, sampled_augmentations
from _common import sized_image_encoder, subsample
from hf_contrast.data import CHANGE_NAMES, load_digits_dataset, make_change_pairs
from hf_contrast.metrics import class_orthogonality
from hf_contrast.training import LOCALTrainer

DEFAULTS = {
    "output_dir": "outputs/local-{loss}",
    "max_steps": 300,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 128,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
    "local_beta": 1.0,
    "local_alpha_schedule": "inverse_epoch",
}


@dataclass
class ModelArguments:
    """What to train and on which pairs (α, β, temperature are ContrastiveTrainingArguments)."""

    loss: str = field(default="ocl", metadata={"help": "'ocl' (LOCAL) or 'supcon' (L-SCL)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model with stage feature maps."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    dataset: str | None = field(
        default=None, metadata={"help": "Paired data (image_pre, image_post, label); default: change pairs of the digits."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Build pairs from this many training images (quick runs)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Build test pairs from this many test images."})
    num_augmentations: int = field(default=8, metadata={"help": "Sampled augmentations for the cosine histogram."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the pair representations: pca or tsne."})


def load_pairs(
    name: str | None, image_size: int, seed: int, max_train: int | None, max_eval: int | None
) -> tuple[Dataset, Dataset]:
    """Train/test change pairs of the embedded digits, or a paired dataset from the Hub / disk."""
    if name is None:
        digits = subsample(load_digits_dataset(image_size=image_size, seed=seed), seed, max_train, max_eval)
        return make_change_pairs(digits["train"], seed=seed), make_change_pairs(digits["test"], seed=seed + 1)
    import datasets

    try:
        data = datasets.load_dataset(name)
    except Exception as error:
        raise SystemExit(
            f"Could not load the paired dataset `{name}` ({type(error).__name__}: {error}). Offline, pass a local "
            "folder `datasets.load_dataset` can read, or drop --dataset for the embedded change pairs."
        ) from error
    if "test" not in data:
        data = data["train"].train_test_split(test_size=0.2, seed=seed)
    data = subsample(data, seed, max_train, max_eval)
    return data["train"], data["test"]


def main() -> None:
    model_args, args = parse_arguments(ModelArguments, DEFAULTS)
    if model_args.loss not in ("ocl", "supcon"):
        raise SystemExit(f"--loss must be 'ocl' or 'supcon', got {model_args.loss!r}.")
    size = args.image_size or 32
    train, test = load_pairs(model_args.dataset, size, args.seed, model_args.max_train_samples, model_args.max_eval_samples)
    torch.manual_seed(args.seed)
    encoder = sized_image_encoder(model_args.model, model_args.pretrained, args.image_size, projection_dim=model_args.projection_dim)
    trainer = LOCALTrainer(model=encoder, args=args, train_dataset=train, eval_dataset=test, loss=model_args.loss)
    counts = Counter(train[args.label_column])
    names = train.features[args.label_column].names if hasattr(train.features[args.label_column], "names") else CHANGE_NAMES
    if trainer.is_world_process_zero():
        print(
            f"Training {'LOCAL' if model_args.loss == 'ocl' else 'L-SCL'} on {len(train)} pairs "
            f"({', '.join(f'{names[c]}: {n}' for c, n in sorted(counts.items()))}), batches of {args.per_device_train_batch_size} pairs."
        )
    trainer.train()

    prediction = trainer.predict_pairs(test)  # every process takes part (the loader is sharded)
    if not trainer.is_world_process_zero():  # the main process evaluates and writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    labels, predicted = prediction["labels"], prediction["logits"].argmax(dim=1)
    f, f_a = sampled_augmentations(encoder, test["image_pre"][:256], model_args.num_augmentations, seed=args.seed)
    results = {
        **accuracy_and_macro_f1("pair_classifier", labels, predicted),
        "majority_class_accuracy": float((labels == max(counts, key=counts.get)).double().mean()),
        "class_orthogonality": class_orthogonality(prediction["z"], labels),
        "augmentation_cosine_mean": equivariance_metrics(f, f_a)["augmentation_cosine_mean"],
        "train_steps": trainer.state.global_step,
    }
    for c, name in enumerate(names):  # per-class recall: where the rare classes stand
        if (labels == c).any():
            results[f"recall_{name}"] = float((predicted[labels == c] == c).double().mean())
    title = "LOCAL" if model_args.loss == "ocl" else "L-SCL"
    finish(
        trainer,
        results,
        title=title,
        datasets=[model_args.dataset or "sklearn-digits change pairs"],
        training_data=f"{len(train)} image pairs, class = kind of change ({dict(sorted(counts.items()))}).",
        plots={"z": prediction["z"], "labels": labels, "f": f, "f_a": f_a, "projection": model_args.projection_plot},
    )
    # The pair classifier belongs to the loss, not to the encoder: keep it next to the encoder.
    torch.save(trainer.loss.state_dict(), f"{args.output_dir}/local_loss.pt")


if __name__ == "__main__":
    main()
