# run_ocl.py — OCL vs SupCon on long-tailed data with small batches.
#
# OCL, the orthonormal contrastive loss of LOCAL (docs/methods.md §3), is SupCon where every negative
# enters the denominator through |cos|: classes are pushed to orthogonal directions instead of
# opposite ones, which matters when a small batch holds few classes and the classes are skewed.
# With no arguments: a timm ResNet-18 from scratch on the embedded digits as they are, batches of 32
# images × 2 views; `--imbalance_ratio 10` first makes the training split long-tailed (the largest
# class keeps 10× the images of the smallest); data that is already long-tailed is used as is.
# Reports accuracy and macro-F1 of a linear probe and of a kNN classifier fitted on frozen features of
# the training split and scored on the test split (ProbeEvaluator, at every evaluation and at the end),
# the trainer's metrics of the test split, and the orthogonality of its class means in the projection space (mean |cos|, 0 =
# orthogonal). `--method supcon` trains the SupCon baseline.
#
# Launch:
#   one CPU or GPU   python examples/run_ocl.py [--method supcon] [--imbalance_ratio 10]
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_ocl.py --gather_distributed
#                    (--gather_distributed: anchors see the negatives of every process, as one big batch)
# Writes to --output_dir (default outputs/<method>): the encoder and its model card (trainer.save_model),
# results.json, embeddings.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from _common import class_names, final_evaluation, load_images, parse_args, save_plots, write_results
from hf_contrast.data import make_long_tailed
from hf_contrast.evaluation import ProbeEvaluator, balanced_subset, encode_dataset
from hf_contrast.metrics import class_orthogonality
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.training import ContrastiveTrainer

DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 300,
    "per_device_train_batch_size": 32,  # small batches: few positives and few classes per batch
    "per_device_eval_batch_size": 256,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
    "eval_strategy": "steps",
    "eval_steps": 100,
}


@dataclass
class ScriptArguments:
    """What to train and on which data (temperature, n_views: the objective's config flags)."""

    method: str = field(default="ocl", metadata={"help": "A registered supervised objective: ocl or supcon."})
    imbalance_ratio: float | None = field(
        default=None, metadata={"help": "Make the training split long-tailed: largest / smallest class size (None: as is)."}
    )
    model: str = field(default="resnet18", metadata={"help": "Any timm model name."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    dataset: str | None = field(default=None, metadata={"help": "Image folder or Hub dataset id; default: the embedded digits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a class-balanced subset of this many rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a class-balanced subset of this many rows."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the test embeddings: pca or tsne."})
    max_plot_samples: int = field(default=2000, metadata={"help": "Test embeddings (class-balanced) in embeddings.png."})


def main() -> None:
    script, args, config = parse_args(ScriptArguments, DEFAULTS, method="ocl")
    data = load_images(script.dataset, args, script.max_train_samples, script.max_eval_samples)
    names = class_names(data["train"], args.label_column)
    train = make_long_tailed(data["train"], script.imbalance_ratio, label_column=args.label_column, seed=args.seed)
    test = data["test"]
    torch.manual_seed(args.seed)
    try:
        encoder = ContrastiveEncoder.from_backbone(script.model, pretrained=script.pretrained, projection_dim=script.projection_dim)
    except HubUnavailableError as error:
        raise SystemExit(f"{error}\nOr drop `--pretrained` to train `{script.model}` from scratch.") from error
    # Macro-F1 weighs every class alike, so the rare classes count: the probes report it next to the accuracy.
    encode = dict(input_column=args.image_column, label_column=args.label_column, batch_size=args.per_device_eval_batch_size)
    probe = ProbeEvaluator(
        train, test, knn_k=args.knn_k, knn_temperature=args.knn_temperature, seed=args.seed, progress=False, **encode
    )
    trainer = ContrastiveTrainer(
        model=encoder, args=args, objective=get_objective(script.method)(config), train_dataset=train, eval_dataset=test,
        evaluator=probe,
    )
    counts = sorted(Counter(train[args.label_column]).values(), reverse=True)
    if trainer.is_world_process_zero():
        shape = "as is" if script.imbalance_ratio is None else f"long-tailed with imbalance {script.imbalance_ratio:g}"
        print(
            f"Training {script.method} on {script.dataset or 'the embedded digits'} ({shape}: class sizes {counts}, "
            f"ratio {counts[0] / counts[-1]:.1f}), batches of {args.per_device_train_batch_size}."
        )
    trainer.train()
    results = final_evaluation(trainer)  # the trainer's evaluation of the final encoder (every process)
    trainer.save_model()  # encoder + model card, on the main process

    if not trainer.is_world_process_zero():  # the main process writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    test_z, test_y = encode_dataset(encoder, test, **encode)
    test_p, _ = encode_dataset(encoder, test, output="projections", **encode)
    results |= {
        # Of the projections the loss shapes (the trainer's `class_orthogonality` uses `eval_representation`).
        "projection_class_orthogonality": class_orthogonality(test_p, test_y),
        "train_class_sizes": counts,
        "train_steps": trainer.state.global_step,
    }
    write_results(args.output_dir, script.method, results)
    shown = balanced_subset(test_y, min(script.max_plot_samples, len(test_y)), args.seed)
    save_plots(
        args.output_dir, script.method, trainer.state.log_history, z=test_z[shown], labels=test_y[shown], names=names,
        projection=script.projection_plot, seed=args.seed,
    )
    if args.push_to_hub:
        print(f"Pushed to the Hub: {trainer.push_to_hub()}")


if __name__ == "__main__":
    main()
