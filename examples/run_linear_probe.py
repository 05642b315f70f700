#!/usr/bin/env python
# run_linear_probe.py — evaluate a trained encoder on frozen features: linear-probe and kNN accuracy.
#
# Loads a ContrastiveEncoder (the output folder of any run_*.py, or a Hub repository), encodes the train
# and test splits with the encoder's own preprocessing, and reports the accuracy and macro-F1 of a
# multinomial logistic-regression probe (scikit-learn, standardised features) and of a weighted cosine
# kNN classifier (k = 20, τ = 0.07) fitted on the train split and scored on the test split
# (hf_contrast.evaluation.ProbeEvaluator: the names and numbers of the training runs' evaluation).
# Images: the embedded digits or --dataset (image folder / Hub id); text encoders: the topics of the
# shipped sentences or --dataset (Hub id / CSV / TSV / JSON / parquet with --text_column, --label_column).
# No training, no GPU needed.
#
# Launch:
#   python examples/run_linear_probe.py                                  (probes outputs/care)
#   python examples/run_linear_probe.py --model outputs/simclr --dataset ./my_images
#   python examples/run_linear_probe.py --model user/my-care-resnet18   (from the Hub)
# Writes eval_results.json and embeddings.png to --output_dir (default <model dir>/linear_probe).
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field

import datasets
import torch
import transformers
from transformers import HfArgumentParser

from hf_contrast.data import SENTENCE_PAIRS_PATH, load_image_splits, load_text_dataset, take_subset
from hf_contrast.data.naming import loader_notes
from hf_contrast.errors import InputError
from hf_contrast.evaluation import ProbeEvaluator, balanced_split
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.plots import save_training_plots
from hf_contrast.training import run_main
from hf_contrast.training.run_setup import data_image_sizes

logger = transformers.utils.logging.get_logger(__name__)


@dataclass
class ProbeArguments:
    """Which encoder to probe, on which data."""

    model: str = field(default="outputs/care", metadata={"help": "Local directory or Hub id of the encoder."})
    dataset: str | None = field(
        default=None, metadata={"help": "Image folder / Hub id (images) or a text file / Hub id (text)."}
    )
    image_column: str = field(default="image", metadata={"help": "Image column of --dataset."})
    text_column: str = field(default="sentence1", metadata={"help": "Text column of --dataset."})
    label_column: str = field(default="label", metadata={"help": "Label column of --dataset."})
    representation: str = field(
        default="embeddings", metadata={"help": "'embeddings' (backbone features) or 'projections'."}
    )
    knn_k: int = field(default=20, metadata={"help": "Neighbours of the kNN classifier."})
    batch_size: int = field(default=256, metadata={"help": "Encoding batch size."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Fit the probes on a class-balanced subset of this many rows."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on a class-balanced subset of this many rows."}
    )
    on_bad_image: str = field(
        default="raise",
        metadata={"help": "An unreadable image: 'raise' (name the file) or 'skip' (leave it out, warn)."},
    )
    seed: int = field(
        default=0, metadata={"help": "Seed of the train/test split of data without one, and of the subsets."}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Where to write eval_results.json (default <model>/linear_probe)."}
    )


def setup_logging() -> None:
    """The script's and hf_contrast's messages at info level, transformers' and datasets' at warning level."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    for name in (__name__, "hf_contrast"):
        logging.getLogger(name).setLevel(logging.INFO)
    datasets.utils.logging.set_verbosity_warning()
    transformers.utils.logging.set_verbosity_warning()


def image_sizes(encoder: ContrastiveEncoder, train: datasets.Dataset) -> str:
    """The size the images are encoded at (the encoder's input size, whatever theirs) and theirs, for the log: the
    size changes the result, and a probe of 28-px images at a 32-px encoder says so."""
    height, width = (int(side) for side in encoder.data_config["input_size"][-2:])
    seen, _ = data_image_sizes(train, "image")
    theirs = ", ".join(f"{h}x{w}" for h, w in seen[:3]) + (", ..." if len(seen) > 3 else "")
    if seen == [(height, width)]:
        return f"images at their own {height}x{width} px (the encoder's input size)"
    return f"images resized to {height}x{width} px, the encoder's input size (theirs: {theirs or 'unknown'})"


def main() -> None:
    (args,) = HfArgumentParser(ProbeArguments).parse_args_into_dataclasses()
    setup_logging()
    if args.representation not in ("embeddings", "projections"):
        raise SystemExit(f"--representation must be 'embeddings' or 'projections', got {args.representation!r}.")
    try:
        encoder = ContrastiveEncoder.from_pretrained(args.model)
    except OSError as error:
        raise SystemExit(
            f"Could not load an encoder from `{args.model}` ({error}).\nPass the output folder of a run (e.g. "
            "`--model outputs/care` after `python examples/run_care.py`) or a Hub repository id; offline, Hub ids "
            "only work when the files are already in the local cache."
        ) from error
    encoder.to("cuda" if torch.cuda.is_available() else "cpu")
    encode = dict(label_column="label", batch_size=args.batch_size, output=args.representation)  # the loaders' names
    if encoder.input_modality == "text":
        try:
            data = load_text_dataset(args.dataset or SENTENCE_PAIRS_PATH, split=None, text_column=args.text_column,
                                     label_column=args.label_column)  # fmt: skip
        except InputError as error:  # a missing file, a wrong column: the message names the fix
            raise SystemExit(f"--dataset: {error}") from error
        args.text_column, args.label_column = "text", "label"  # the loader renames the chosen columns
        if "test" not in data:
            train_rows, test_rows = balanced_split(list(data["train"][args.label_column]), 0.25, args.seed)
            data = {
                "train": data["train"].select(train_rows.tolist()),
                "test": data["train"].select(test_rows.tolist()),
            }
        for split, argument in (("train", "max_train_samples"), ("test", "max_eval_samples")):  # noted for the log
            data[split] = take_subset(
                data[split], getattr(args, argument), argument=argument, seed=args.seed, label_column=args.label_column
            )
        encode["input_column"] = args.text_column
    else:
        try:
            data = load_image_splits(
                args.dataset, image_column=args.image_column, label_column=args.label_column,
                image_size=int(encoder.data_config["input_size"][-1]), max_train_samples=args.max_train_samples,
                max_eval_samples=args.max_eval_samples, seed=args.seed,
            )  # fmt: skip
        except InputError as error:  # a missing path, a refused folder layout: the message names the fix
            raise SystemExit(f"--dataset: {error}") from error
        except (ConnectionError, OSError) as error:
            raise SystemExit(
                f"Could not load the dataset `{args.dataset}` ({type(error).__name__}: {error}).\nOffline, pass a "
                "local image folder instead (`--dataset path/to/folder`, one sub-folder per class), or drop "
                "`--dataset`."
            ) from error
        args.image_column, args.label_column = "image", "label"  # the loader renames the chosen columns
        encode.update(input_column=args.image_column, on_bad_image=args.on_bad_image)
    logger.info(
        f"Probing {args.model} ({args.representation}) on {len(data['train'])} train / {len(data['test'])} test rows"
        + (f", {image_sizes(encoder, data['train'])}" if encoder.input_modality != "text" else "")
        + "".join(f"; {split}: {note}" for split in ("train", "test") for note in loader_notes(data[split]))
        + "."
    )
    probe = ProbeEvaluator(
        data["train"], data["test"], knn_k=min(args.knn_k, len(data["train"])), seed=args.seed, **encode
    )
    fit_z, fit_y, test_z, test_y = probe.encode(encoder)  # each split encoded once: the test split's for the picture
    metrics = {**probe.score(fit_z, fit_y, test_z, test_y), "num_train": len(fit_y), "num_test": len(test_y)}
    output_dir = args.output_dir or (
        os.path.join(args.model, "linear_probe") if os.path.isdir(args.model) else "outputs/linear_probe"
    )
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "eval_results.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(metrics, handle, indent=4, sort_keys=True)
    width = max(len(key) for key in metrics)
    lines = (
        f"  {key:<{width}} = {value:.4f}" if isinstance(value, float) else f"  {key:<{width}} = {value}"
        for key, value in metrics.items()
    )
    logger.info(f"***** probe metrics (written to {path}) *****\n" + "\n".join(lines))
    label_feature = data["train"].features.get(args.label_column)
    name = os.path.basename(os.path.normpath(args.model))
    class_names = list(label_feature.names) if hasattr(label_feature, "names") else None
    save_training_plots(output_dir, name, z=test_z, labels=test_y, class_names=class_names, seed=args.seed)


if __name__ == "__main__":
    run_main(main)  # an input error ends the run with its message, no traceback
