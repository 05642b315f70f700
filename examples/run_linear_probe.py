# run_linear_probe.py — evaluate a trained encoder on frozen features: linear-probe and kNN accuracy.
#
# Loads a ContrastiveEncoder saved with `save_pretrained` (the output folder of any run_*.py), the
# publishing layout of `save_for_hub`, or a Hub repository, encodes the train and test splits with
# the encoder's own preprocessing, and reports the top-1 accuracy of a multinomial logistic-regression
# probe (L-BFGS, float64) and of a weighted cosine kNN classifier (k = 20, τ = 0.07) fitted on the
# train split. Images: the embedded digits or --dataset; text encoders: the topics of the shipped
# sentences. No training, no GPU needed.
#
# Launch:
#   python examples/run_linear_probe.py                                  (probes outputs/care)
#   python examples/run_linear_probe.py --model_name_or_path outputs/simclr
#   python examples/run_linear_probe.py --model_name_or_path user/my-care-resnet18   (from the Hub)
# Writes results.json and embeddings.png to --output_dir (default <model dir>/linear_probe).
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch
from transformers import HfArgumentParser

from _common import encode_images, encode_texts, load_image_dataset, print_results, save_plots, subsample
from hf_contrast.metrics import knn_accuracy, linear_probe_accuracy
from hf_contrast.models import ContrastiveEncoder


@dataclass
class ProbeArguments:
    """Which encoder to probe, on which data."""

    model_name_or_path: str = field(default="outputs/care", metadata={"help": "Local directory or Hub id of the encoder."})
    dataset: str | None = field(default=None, metadata={"help": "Hub dataset id or local image folder; default: the digits."})
    image_column: str = field(default="image", metadata={"help": "Image column of --dataset."})
    label_column: str = field(default="label", metadata={"help": "Label column of --dataset."})
    representation: str = field(default="embeddings", metadata={"help": "'embeddings' (backbone features) or 'projections'."})
    knn_k: int = field(default=20, metadata={"help": "Neighbours of the kNN classifier."})
    batch_size: int = field(default=256, metadata={"help": "Encoding batch size."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Fit the probes on a random subset of this many rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a random subset of this many rows."})
    seed: int = field(default=0, metadata={"help": "Seed of the train/test split of data without one."})
    output_dir: str | None = field(default=None, metadata={"help": "Where to write results.json (default <model>/linear_probe)."})


def load_encoder(name: str) -> ContrastiveEncoder:
    """``ContrastiveEncoder.from_pretrained`` with a readable message when nothing is found."""
    try:
        return ContrastiveEncoder.from_pretrained(name)
    except OSError as error:
        raise SystemExit(
            f"Could not load an encoder from `{name}` ({error}).\nPass the output folder of a run (e.g. "
            "`--model_name_or_path outputs/care` after `python examples/run_care.py`) or a Hub repository id; "
            "offline, Hub ids only work when the files are already in the local cache."
        ) from error


def main() -> None:
    (args,) = HfArgumentParser(ProbeArguments).parse_args_into_dataclasses()
    if args.representation not in ("embeddings", "projections"):
        raise SystemExit(f"--representation must be 'embeddings' or 'projections', got {args.representation!r}.")
    encoder = load_encoder(args.model_name_or_path)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    encoder.to(device).eval()
    if encoder.config.backbone_type == "text":
        from hf_contrast.data import load_sentence_pairs

        data = subsample(load_sentence_pairs(seed=args.seed), args.seed, args.max_train_samples, args.max_eval_samples)
        name, column, label = "the shipped sentence topics", "sentence1", "label"
        train_z = encode_texts(encoder, data["train"][column], args.batch_size)[args.representation]
        test_z = encode_texts(encoder, data["test"][column], args.batch_size)[args.representation]
    else:
        size = int(encoder.data_config["input_size"][-1])
        data = load_image_dataset(
            args.dataset, size, args.seed, args.image_column, args.label_column,
            max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
        )
        name, column, label = args.dataset or "the embedded digits", args.image_column, args.label_column
        train_z = encode_images(encoder, data["train"][column], args.batch_size)[args.representation]
        test_z = encode_images(encoder, data["test"][column], args.batch_size)[args.representation]
    train_y, test_y = torch.tensor(data["train"][label]), torch.tensor(data["test"][label])
    results = {
        "linear_probe_accuracy": linear_probe_accuracy(train_z, train_y, test_z, test_y),
        "knn_accuracy": knn_accuracy(train_z, train_y, test_z, test_y, k=min(args.knn_k, len(train_z))),
        "num_train": len(train_y),
        "num_test": len(test_y),
    }
    output_dir = args.output_dir or (
        os.path.join(args.model_name_or_path, "linear_probe") if os.path.isdir(args.model_name_or_path) else "outputs/linear_probe"
    )
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
    save_plots(output_dir, None, z=test_z, labels=test_y, title=os.path.basename(os.path.normpath(args.model_name_or_path)))
    print_results(f"{args.model_name_or_path} on {name} ({args.representation}); written to {output_dir}", results)


if __name__ == "__main__":
    main()
