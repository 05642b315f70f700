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
#   one CPU or GPU      python examples/run_care.py          (one CPU process uses every core)
#   several GPUs        accelerate launch --multi_gpu --num_processes 8 examples/run_care.py --gather_distributed
#   2 CPU processes     accelerate launch --multi_gpu --num_processes 2 examples/run_care.py   (gloo; for testing)
# Variants: --method simclr | care_moco | spectral | vicreg | binary_nce | … (any registered objective;
#           `--method X --help` lists X's hyperparameter flags); --model <timm name> [--pretrained];
#           --dataset <image folder or Hub id>; every TrainingArguments flag (--max_steps, --push_to_hub…).
# Writes to --output_dir (default outputs/<method>): the encoder and its model card (trainer.save_model),
# results.json, embeddings.png, augmentation_cosines.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from _common import augmented_embeddings, class_names, final_evaluation, load_images, parse_args, save_plots, write_results
from hf_contrast.evaluation import EquivarianceEvaluator, ProbeEvaluator, SequentialEvaluator, balanced_subset, encode_dataset
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.training import ContrastiveTrainer

# Defaults chosen so that a bare run finishes in a few minutes on a 2-core CPU (see README).
DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 150,
    "per_device_train_batch_size": 128,  # CARE: 4 views per image, 512 images per step
    "per_device_eval_batch_size": 256,
    "learning_rate": 2e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
    "n_splits": 8,  # CARE: chunks of m = 16 images share one augmentation pair
    "moco_queue_size": 1024,  # CARE-MoCo: the digits have 1,437 training images
    "eval_strategy": "steps",
    "eval_steps": 50,
}


@dataclass
class ScriptArguments:
    """What to train and on which data (method hyperparameters: the objective's config flags)."""

    method: str = field(default="care", metadata={"help": "A registered objective (care, simclr, care_moco, …)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model name (or 'hf-hub:…' / 'local-dir:…')."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    dataset: str | None = field(default=None, metadata={"help": "Image folder or Hub dataset id; default: the embedded digits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a class-balanced subset of this many rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a class-balanced subset of this many rows."})
    num_probe_images: int = field(default=256, metadata={"help": "Test images (class-balanced) for the Wahba error / γ_f."})
    num_augmentations: int = field(default=8, metadata={"help": "Sampled augmentations for the Wahba error / γ_f."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})
    max_plot_samples: int = field(default=2000, metadata={"help": "Test embeddings (class-balanced) in embeddings.png."})


def main() -> None:
    script, args, config = parse_args(ScriptArguments, DEFAULTS, method="care")
    # One CPU process: use every core (torch's default is the physical cores; `accelerate launch` sets 1).
    if args.world_size == 1 and args.device.type == "cpu" and ("OMP_NUM_THREADS" not in os.environ or "ACCELERATE_MIXED_PRECISION" in os.environ):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch.set_num_threads(cores or 1)

    data = load_images(script.dataset, args, script.max_train_samples, script.max_eval_samples)
    names = class_names(data["train"], args.label_column)
    torch.manual_seed(args.seed)  # the same initial weights for every method
    try:
        encoder = ContrastiveEncoder.from_backbone(script.model, pretrained=script.pretrained, projection_dim=script.projection_dim)
    except HubUnavailableError as error:
        raise SystemExit(f"{error}\nOr drop `--pretrained` to train `{script.model}` from scratch.") from error
    if args.image_size is not None:
        encoder.set_image_size(args.image_size)  # what the saved data config (and timm's pretrained_cfg) says

    # At every evaluation: linear probe and kNN fitted on the train split's frozen embeddings, scored on the test
    # split; the Wahba error / γ_f of a fixed class-balanced test batch under sampled augmentations.
    encode = dict(input_column=args.image_column, label_column=args.label_column, batch_size=args.per_device_eval_batch_size)
    probe = ProbeEvaluator(
        data["train"], data["test"], knn_k=args.knn_k, knn_temperature=args.knn_temperature, seed=args.seed, progress=False,
        **encode,
    )
    equivariance = EquivarianceEvaluator.from_image_dataset(
        data["test"], encoder.data_config, num_samples=min(script.num_probe_images, len(data["test"])),
        image_column=args.image_column, label_column=args.label_column, seed=args.seed,
        num_augmentations=script.num_augmentations,
    )
    trainer = ContrastiveTrainer(
        model=encoder,
        args=args,
        objective=get_objective(script.method)(config),
        train_dataset=data["train"],
        eval_dataset=data["test"],
        evaluator=SequentialEvaluator([probe, equivariance]),
    )
    if trainer.is_world_process_zero():
        print(
            f"Training {script.method} on {script.dataset or 'the embedded digits'} ({len(data['train'])} train / "
            f"{len(data['test'])} test images, {encoder.data_config['input_size'][-1]}px) with {script.model} "
            f"({'pretrained' if script.pretrained else 'from scratch'}): {args.max_steps} steps × "
            f"{args.per_device_train_batch_size} images × {args.world_size} process(es), {torch.get_num_threads()} "
            f"thread(s) per process."
        )
    trainer.train()
    # ---- final evaluation of the trained encoder: the trainer's evaluation, as during training (every process) ----
    results = final_evaluation(trainer)
    trainer.save_model()  # encoder + model card (written by the library, with the final evaluation), on the main process
    if not trainer.is_world_process_zero():
        return
    results |= {
        "train_steps": trainer.state.global_step,
        "train_runtime_seconds": round(next(e["train_runtime"] for e in trainer.state.log_history if "train_runtime" in e), 1),
    }
    write_results(args.output_dir, script.method, results)
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    test_z, test_y = encode_dataset(encoder, data["test"], **encode)  # for the picture
    shown = balanced_subset(test_y, min(script.max_plot_samples, len(test_y)), args.seed)
    f, f_a = augmented_embeddings(encoder, equivariance)
    save_plots(
        args.output_dir, script.method, trainer.state.log_history, z=test_z[shown], labels=test_y[shown], names=names,
        f=f, f_a=f_a, projection=script.projection_plot, seed=args.seed,
    )
    if args.push_to_hub:
        print(f"Pushed to the Hub: {trainer.push_to_hub()}")


if __name__ == "__main__":
    main()
