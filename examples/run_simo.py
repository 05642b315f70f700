# run_simo.py — supervised SimO / AFCL: classes pulled together, class means pushed to orthogonality.
#
# SimO (https://arxiv.org/abs/2410.05233) trains on class-major batches of C classes × k samples
# (the AFCL sampler, C < half the classes) with the similarity–orthogonality loss on the raw
# (un-normalised) projections. With no arguments: a timm ResNet-18 from scratch on the embedded
# scikit-learn digits, C = 4 classes × k = 32 images per batch; reports the class-mean
# orthogonality of the test projections (mean |cos| between class means, 0 = orthogonal) and
# linear-probe / kNN accuracy and macro-F1 of frozen features (fitted on train, scored on test), with
# the trainer's metrics of the test split, at every evaluation and at the end.
#
# Launch:
#   one CPU or GPU   python examples/run_simo.py          (or: accelerate launch examples/run_simo.py)
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_simo.py
#                    (each process draws its own C × k batch; the sampler's batches are sharded)
# Options: --classes_per_batch, --samples_per_class (their product must be --per_device_train_batch_size),
#          --olean, --n_views 2, --model, --dataset, --image_column, --label_column, every TrainingArguments flag.
# Writes to --output_dir (default outputs/simo): the encoder and its model card (trainer.save_model),
# results.json, embeddings.png, loss_curves.png, eval_curves.png.
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from _common import class_names, final_evaluation, load_images, parse_args, save_plots, write_results
from hf_contrast.evaluation import ProbeEvaluator, balanced_subset, encode_dataset
from hf_contrast.metrics import class_orthogonality, effective_rank
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.training import ContrastiveTrainer

DEFAULTS = {
    "output_dir": "outputs/{method}",
    "max_steps": 200,
    "classes_per_batch": 4,  # C < 10 / 2 classes per batch (the paper's stability fix)
    "samples_per_class": 32,
    "per_device_train_batch_size": 128,  # = C × k
    "per_device_eval_batch_size": 256,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
    "eval_strategy": "steps",
    "eval_steps": 100,
}


@dataclass
class ScriptArguments:
    """What to train and on which data (SimO hyperparameters: the objective's config flags)."""

    method: str = field(default="simo", metadata={"help": "A registered objective needing class-major batches (simo)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model name."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=64, metadata={"help": "Output size of the projection head (>= the number of classes)."})
    dataset: str | None = field(default=None, metadata={"help": "Image folder or Hub dataset id; default: the embedded digits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a class-balanced subset of this many rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a class-balanced subset of this many rows."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the test projections: pca or tsne."})
    max_plot_samples: int = field(default=2000, metadata={"help": "Test projections (class-balanced) in embeddings.png."})


def main() -> None:
    script, args, config = parse_args(ScriptArguments, DEFAULTS, method="simo")
    data = load_images(script.dataset, args, script.max_train_samples, script.max_eval_samples)
    names = class_names(data["train"], args.label_column)
    torch.manual_seed(args.seed)
    try:  # SimO works on raw projections: its orthogonality term needs them un-normalised.
        encoder = ContrastiveEncoder.from_backbone(
            script.model, pretrained=script.pretrained, projection_dim=script.projection_dim, normalize_projections=False
        )
    except HubUnavailableError as error:
        raise SystemExit(f"{error}\nOr drop `--pretrained` to train `{script.model}` from scratch.") from error
    encode = dict(input_column=args.image_column, label_column=args.label_column, batch_size=args.per_device_eval_batch_size)
    probe = ProbeEvaluator(  # linear probe and kNN fitted on the train split, scored on the test split
        data["train"], data["test"], knn_k=args.knn_k, knn_temperature=args.knn_temperature, seed=args.seed, progress=False,
        **encode,
    )
    trainer = ContrastiveTrainer(
        model=encoder,
        args=args,
        objective=get_objective(script.method)(config),
        train_dataset=data["train"],
        eval_dataset=data["test"],
        evaluator=probe,
    )
    if trainer.is_world_process_zero():
        print(
            f"Training {script.method} on {script.dataset or 'the embedded digits'} ({len(data['train'])} train images): "
            f"{args.max_steps} steps of {config.classes_per_batch} classes × {config.samples_per_class} images."
        )
    trainer.train()
    results = final_evaluation(trainer)  # the trainer's evaluation of the final encoder (every process)
    trainer.save_model()  # encoder + model card, on the main process

    if not trainer.is_world_process_zero():  # the main process writes
        return
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    test_p, test_y = encode_dataset(encoder, data["test"], output="projections", **encode)
    results |= {
        # Of the projections SimO shapes (the trainer's `class_orthogonality` uses `eval_representation`).
        "projection_class_orthogonality": class_orthogonality(test_p, test_y),
        "projection_effective_rank": effective_rank(test_p),
        "train_steps": trainer.state.global_step,
    }
    write_results(args.output_dir, script.method, results)
    shown = balanced_subset(test_y, min(script.max_plot_samples, len(test_y)), args.seed)
    save_plots(
        args.output_dir, script.method, trainer.state.log_history, z=test_p[shown], labels=test_y[shown], names=names,
        projection=script.projection_plot, seed=args.seed,
    )
    if args.push_to_hub:
        print(f"Pushed to the Hub: {trainer.push_to_hub()}")


if __name__ == "__main__":
    main()
