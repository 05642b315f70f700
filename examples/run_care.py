# run_care.py — train an image encoder from scratch with CARE, SimCLR, CARE-MoCo or another pair loss.
#
# CARE (Contrastive Augmentation-induced Rotational Equivariance, https://arxiv.org/abs/2306.13924)
# adds to SimCLR's InfoNCE a term λ·L_equi that asks every augmentation to act on the embedding
# sphere as ONE rotation (the batch is cut into `--n_splits` chunks sharing an augmentation pair).
# With no arguments this trains a timm ResNet-18 from scratch on the embedded scikit-learn digits
# (32×32, nothing downloaded) and reports linear-probe and kNN accuracy, the Wahba error and γ_f of
# test embeddings under sampled augmentations (lower = closer to a rotation).
#
# Launch (the same script everywhere, Accelerate picks the devices):
#   one CPU or GPU      python examples/run_care.py                  (or: accelerate launch examples/run_care.py)
#   both cores of a CPU accelerate launch --cpu examples/run_care.py
#   several GPUs        accelerate launch --multi_gpu --num_processes 8 examples/run_care.py --gather_distributed
#   2 CPU processes     accelerate launch --multi_gpu --num_processes 2 examples/run_care.py   (gloo; for testing)
# Variants: --method simclr (the baseline, same pipeline) | moco (CARE-MoCo) | spectral | vicreg | binary_nce;
#           --model <any timm name> [--pretrained]; --dataset <Hub id or local image folder>;
#           every TrainingArguments / ContrastiveTrainingArguments flag (--max_steps, --care_weight, --push_to_hub…).
# Writes to --output_dir (default outputs/<method>): the encoder (save_pretrained), README.md (model
# card), results.json, embeddings.png, augmentation_cosines.png, loss_curves.png, equivariance_curves.png.
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from datasets import DatasetDict
from PIL.Image import Image
from transformers import TrainerCallback

from _common import equivariance_metrics, finish, load_image_dataset, parse_arguments, sampled_augmentations, sized_image_encoder
from _common import encode_splits
from hf_contrast.metrics import GeometryMetricsCallback, knn_accuracy, linear_probe_accuracy, uniformity
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training import PAIR_LOSSES, CARETrainer, ContrastiveTrainer, ContrastiveTrainingArguments, SimCLRTrainer

METHODS = ("care", "simclr", "moco", *[name for name in PAIR_LOSSES if name != "info_nce"])

# Defaults chosen so that a bare run finishes in under 10 minutes on a 2-core CPU (see README).
DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 150,
    "per_device_train_batch_size": 128,  # 4 views per image for CARE: 512 images per step
    "per_device_eval_batch_size": 256,
    "learning_rate": 2e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
    "n_splits": 8,  # chunks of m = 16 images share one augmentation pair
    "care_weight": 0.01,  # λ, the paper's CIFAR-10 value
    "moco_queue_size": 1024,  # the digits have 1,437 training images
    "dataloader_drop_last": True,  # CARE needs batches divisible by n_splits
    "eval_strategy": "steps",
    "eval_steps": 50,
}


@dataclass
class ModelArguments:
    """What to train and on which data (training hyperparameters are ContrastiveTrainingArguments)."""

    method: str = field(default="care", metadata={"help": f"One of {METHODS}."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model name (or 'hf-hub:…' / 'local-dir:…')."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    dataset: str | None = field(
        default=None, metadata={"help": "Hub dataset id or local image folder; default: the embedded digits."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a random subset of this many rows (quick runs)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a random subset of this many rows."})
    num_probe_images: int = field(default=256, metadata={"help": "Test images for the Wahba error / γ_f."})
    num_augmentations: int = field(default=8, metadata={"help": "Sampled augmentations for the Wahba error / γ_f."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})


def build_trainer(
    model_args: ModelArguments,
    args: ContrastiveTrainingArguments,
    encoder: ContrastiveEncoder,
    data: DatasetDict,
    callbacks: list[TrainerCallback],
) -> ContrastiveTrainer:
    """The method's trainer: CARE / CARE-MoCo, or SimCLR with the chosen pair objective."""
    common = dict(model=encoder, args=args, train_dataset=data["train"], eval_dataset=data["test"], callbacks=callbacks)
    if model_args.method in ("care", "moco"):
        return CARETrainer(method=model_args.method, **common)
    return SimCLRTrainer(loss="info_nce" if model_args.method == "simclr" else model_args.method, **common)


def geometry_callback(encoder: ContrastiveEncoder, images: list[Image], labels: torch.Tensor, size: int) -> GeometryMetricsCallback:
    """Logs Wahba error and γ_f of a fixed test batch under 4 sampled augmentations at each evaluation."""
    from hf_contrast.augment import simclr_transform_from_data_config
    from hf_contrast.training import raw_image_transform

    config = encoder.data_config
    raw = torch.stack([raw_image_transform(size)(img) for img in images])
    mean, std = torch.tensor(config["mean"]).view(1, -1, 1, 1), torch.tensor(config["std"]).view(1, -1, 1, 1)
    augment = simclr_transform_from_data_config(config)
    # The probe holds normalised images; an augmentation un-normalises, augments the batch (one draw), normalises.
    return GeometryMetricsCallback(
        {"pixel_values": (raw / 255.0 - mean) / std},
        labels=labels,
        augment=lambda x: augment((x * std + mean).clamp(0, 1)),
        knn_k=min(20, len(images) - 1),
    )


def main() -> None:
    model_args, args = parse_arguments(ModelArguments, DEFAULTS)
    if model_args.method not in METHODS:
        raise SystemExit(f"--method must be one of {METHODS}, got {model_args.method!r}.")
    size = args.image_size or 32
    data = load_image_dataset(
        model_args.dataset, size, args.seed, args.image_column, args.label_column,
        max_train_samples=model_args.max_train_samples, max_eval_samples=model_args.max_eval_samples,
    )
    torch.manual_seed(args.seed)  # the same initial weights for every method
    encoder = sized_image_encoder(
        model_args.model, model_args.pretrained, args.image_size, projection_dim=model_args.projection_dim
    )

    test = data["test"]
    probe = test.select(range(min(model_args.num_probe_images, len(test))))
    probe_images, probe_labels = probe[args.image_column], torch.tensor(probe[args.label_column])
    callbacks = [geometry_callback(encoder, probe_images[:128], probe_labels[:128], size)] if args.eval_strategy != "no" else []
    trainer = build_trainer(model_args, args, encoder, data, callbacks)
    if trainer.is_world_process_zero():
        print(
            f"Training {model_args.method} on {model_args.dataset or 'the embedded digits'} "
            f"({len(data['train'])} train / {len(test)} test images, {size}px) with {model_args.model} "
            f"({'pretrained' if model_args.pretrained else 'from scratch'}): {args.max_steps} steps × "
            f"{args.per_device_train_batch_size} images × {args.world_size} process(es)."
        )
    trainer.train()

    # ---- final evaluation on the main process: frozen features of train and test images ----
    if not trainer.is_world_process_zero():  # the main process evaluates and writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    train_out, test_out, train_y, test_y = encode_splits(encoder, data["train"], test, args)
    f, f_a = sampled_augmentations(encoder, probe_images, model_args.num_augmentations, seed=args.seed)
    results = {
        "linear_probe_accuracy": linear_probe_accuracy(train_out["embeddings"], train_y, test_out["embeddings"], test_y),
        "knn_accuracy": knn_accuracy(train_out["embeddings"], train_y, test_out["embeddings"], test_y, k=20),
        **equivariance_metrics(f, f_a),
        "uniformity": uniformity(test_out["projections"]),
        "train_steps": trainer.state.global_step,
        "train_runtime_seconds": round(trainer.state.log_history[-1].get("train_runtime", float("nan")), 1),
    }
    finish(
        trainer,
        results,
        title={"care": "CARE", "moco": "CARE-MoCo", "simclr": "SimCLR"}.get(model_args.method, model_args.method),
        datasets=[model_args.dataset or "sklearn-digits"],
        training_data=f"{len(data['train'])} images of {model_args.dataset or 'scikit-learn digits'} at {size}px, SimCLR views.",
        plots={"z": test_out["embeddings"], "labels": test_y, "f": f, "f_a": f_a, "projection": model_args.projection_plot},
    )
    plot_equivariance_curves(trainer.state.log_history, f"{args.output_dir}/equivariance_curves.png")


def plot_equivariance_curves(log_history: list[dict[str, float]], path: str) -> None:
    """Wahba error W/√n and γ_f of the callback's test batch at each evaluation (CARE's Figures 2c and 5)."""
    entries = [e for e in log_history if "eval_wahba_error_per_sample" in e]
    if not entries:  # no evaluation during training (--eval_strategy no)
        return
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.5), layout="constrained")
    steps = [e["step"] for e in entries]
    for ax, key, label in zip(
        figure.subplots(1, 2),
        ("eval_wahba_error_per_sample", "eval_relative_rotational_equivariance"),
        ("Wahba error W/√n", "relative rotational equivariance γ_f"),
    ):
        ax.plot(steps, [e.get(key, float("nan")) for e in entries], marker="o")
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    figure.suptitle("Sampled augmentations on a fixed test batch (lower: closer to one rotation per augmentation)")
    figure.savefig(path)

if __name__ == "__main__":
    main()
