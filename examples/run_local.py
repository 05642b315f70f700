# run_local.py — LOCAL: classify pairs of images (pre, post) by the kind of change between them.
#
# LOCAL (latent orthonormal contrastive learning for paired images, docs/methods.md §3a) passes both
# images through one shared encoder and combines OCL on the normalised projection difference
# z = n(e_pre − e_post), β·OCL on a latent correlation embedding of the backbone's stage maps, and
# the class-weighted cross-entropy of a pair classifier, weighted by α (α decreases every epoch).
# `--contrastive supcon` gives the paper's L-SCL baseline. With no arguments the pairs come from the
# embedded digits: x_post is x_pre unchanged (noise only), with a patch erased, shifted, or replaced
# by another digit, with skewed frequencies 50/25/15/10 %. Reports the trainer's evaluation of held-out
# pairs (built from the test digits): the pair classifier's `accuracy` and `macro_f1` (LOCAL's metrics),
# the embedding metrics of z, and per-class recall. (No frozen-feature probe: a pair is no single input.)
#
# Launch:
#   one CPU or GPU   python examples/run_local.py [--contrastive supcon]   (or: accelerate launch examples/run_local.py)
#   several GPUs     accelerate launch --multi_gpu --num_processes 4 examples/run_local.py --gather_distributed
# Your own pairs: --dataset <Hub id or a folder `datasets.load_dataset` reads> with columns --pre_column,
# --post_column and --label_column (and a test split, else 20 % is held out).
# Writes to --output_dir (default outputs/local-<contrastive>): the encoder and its model card
# (trainer.save_model), local_objective.pt (the pair classifier: it belongs to the objective, not the
# encoder), results.json, embeddings.png (the pair representations z), loss_curves.png, eval_curves.png.
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader

from _common import final_evaluation, parse_args, save_plots, write_results
from hf_contrast.data import load_digits_dataset, make_change_pairs
from hf_contrast.evaluation import balanced_subset
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.objectives import get_objective
from hf_contrast.training import ContrastiveTrainer

DEFAULTS = {
    "output_dir": "outputs/local-{contrastive}",
    "max_steps": 300,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 128,
    "learning_rate": 1e-3,
    "weight_decay": 1e-4,
    "image_size": 32,
    "eval_strategy": "steps",
    "eval_steps": 100,
}


@dataclass
class ScriptArguments:
    """What to train and on which pairs (α, β, temperature, contrastive: the objective's config flags)."""

    method: str = field(default="local", metadata={"help": "A registered paired-image objective (local)."})
    model: str = field(default="resnet18", metadata={"help": "Any timm model with stage feature maps."})
    pretrained: bool = field(default=False, metadata={"help": "Start from timm's pretrained weights (needs the Hub)."})
    projection_dim: int = field(default=128, metadata={"help": "Output size of the projection head."})
    dataset: str | None = field(default=None, metadata={"help": "Paired data; default: change pairs of the digits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Build pairs from this many training images."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Build test pairs from this many test images."})
    projection_plot: str = field(default="tsne", metadata={"help": "2-D projection of the pair representations: pca or tsne."})


def load_pairs(script: ScriptArguments, seed: int, image_size: int, label: str):
    """Train/test change pairs of the embedded digits, or a paired dataset from the Hub / disk."""
    import datasets

    if script.dataset is None:
        digits = load_digits_dataset(image_size=image_size, seed=seed)
        for split, limit in (("train", script.max_train_samples), ("test", script.max_eval_samples)):
            if limit is not None and limit < len(digits[split]):
                digits[split] = digits[split].select(balanced_subset(list(digits[split]["label"]), limit, seed).tolist())
        return make_change_pairs(digits["train"], seed=seed), make_change_pairs(digits["test"], seed=seed + 1)
    try:
        data = datasets.load_dataset(script.dataset)
    except (ConnectionError, OSError, ValueError) as error:
        raise SystemExit(
            f"Could not load the paired dataset `{script.dataset}` ({type(error).__name__}: {error}). Offline, pass a "
            "local folder `datasets.load_dataset` can read, or drop --dataset for the embedded change pairs."
        ) from error
    if "test" not in data:
        data = data["train"].train_test_split(test_size=0.2, seed=seed, stratify_by_column=label)
    return data["train"], data["test"]


def main() -> None:
    script, args, config = parse_args(ScriptArguments, DEFAULTS, method="local")
    train, test = load_pairs(script, args.seed, args.image_size or 32, args.label_column)
    torch.manual_seed(args.seed)
    try:
        encoder = ContrastiveEncoder.from_backbone(script.model, pretrained=script.pretrained, projection_dim=script.projection_dim)
    except HubUnavailableError as error:
        raise SystemExit(f"{error}\nOr drop `--pretrained` to train `{script.model}` from scratch.") from error
    objective = get_objective(script.method)(config)
    trainer = ContrastiveTrainer(model=encoder, args=args, objective=objective, train_dataset=train, eval_dataset=test)
    names = train.features[args.label_column].names
    counts = Counter(train[args.label_column])
    if trainer.is_world_process_zero():
        print(
            f"Training {script.method} ({config.contrastive}) on {len(train)} pairs "
            f"({', '.join(f'{names[c]}: {n}' for c, n in sorted(counts.items()))}), batches of {args.per_device_train_batch_size} pairs."
        )
    trainer.train()
    results = final_evaluation(trainer)  # the trainer's evaluation of the final encoder (every process)
    trainer.save_model()  # encoder + model card, on the main process

    if not trainer.is_world_process_zero():  # the main process writes
        return
    # The pair classifier belongs to the objective: keep its weights next to the encoder.
    torch.save(objective.state_dict(), os.path.join(args.output_dir, "local_objective.pt"))
    # Per-class predictions and the pair representations z (for the recall and the picture).
    encoder = trainer.accelerator.unwrap_model(trainer.model).eval()
    loader = DataLoader(test, batch_size=args.per_device_eval_batch_size, collate_fn=trainer.eval_data_collator)
    logits, z, labels = [], [], []
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(args.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            logits.append(objective.classify(encoder, batch, trainer.views).cpu())
            z.append(objective.eval_embeddings(encoder, batch, trainer.views)[0].cpu())
            labels.append(batch["labels"].cpu())
    predicted, z, labels = torch.cat(logits).argmax(dim=1), torch.cat(z), torch.cat(labels)
    results |= {
        "majority_class_accuracy": float((labels == max(counts, key=counts.get)).double().mean()),
        "train_steps": trainer.state.global_step,
    }
    for c, name in enumerate(names):  # per-class recall: where the rare classes stand
        if (labels == c).any():
            results[f"recall_{name}"] = float((predicted[labels == c] == c).double().mean())
    write_results(args.output_dir, f"{script.method} ({config.contrastive})", results)
    save_plots(
        args.output_dir, f"{script.method} ({config.contrastive})", trainer.state.log_history, z=z, labels=labels,
        names=names, projection=script.projection_plot, seed=args.seed,
    )
    if args.push_to_hub:
        print(f"Pushed to the Hub: {trainer.push_to_hub()}")


if __name__ == "__main__":
    main()
