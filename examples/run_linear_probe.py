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
#   python examples/run_linear_probe.py --model outputs/simclr
#   python examples/run_linear_probe.py --model user/my-care-resnet18   (from the Hub)
# Writes results.json and embeddings.png to --output_dir (default <model dir>/linear_probe).
from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from transformers import HfArgumentParser

from _common import class_names, load_images, save_plots, write_results
from hf_contrast.data import SENTENCE_PAIRS_PATH, load_text_dataset
from hf_contrast.evaluation import ProbeEvaluator, balanced_split, balanced_subset, encode_dataset
from hf_contrast.models import ContrastiveEncoder


@dataclass
class ProbeArguments:
    """Which encoder to probe, on which data."""

    model: str = field(default="outputs/care", metadata={"help": "Local directory or Hub id of the encoder."})
    dataset: str | None = field(default=None, metadata={"help": "Image folder / Hub id (images) or a text file / Hub id (text)."})
    image_column: str = field(default="image", metadata={"help": "Image column of --dataset."})
    text_column: str = field(default="sentence1", metadata={"help": "Text column of --dataset."})
    label_column: str = field(default="label", metadata={"help": "Label column of --dataset."})
    representation: str = field(default="embeddings", metadata={"help": "'embeddings' (backbone features) or 'projections'."})
    knn_k: int = field(default=20, metadata={"help": "Neighbours of the kNN classifier."})
    batch_size: int = field(default=256, metadata={"help": "Encoding batch size."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Fit the probes on a class-balanced subset of this many rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a class-balanced subset of this many rows."})
    seed: int = field(default=0, metadata={"help": "Seed of the train/test split of data without one, and of the subsets."})
    output_dir: str | None = field(default=None, metadata={"help": "Where to write results.json (default <model>/linear_probe)."})


def main() -> None:
    (args,) = HfArgumentParser(ProbeArguments).parse_args_into_dataclasses()
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
    if encoder.config.backbone_type == "text":
        data = load_text_dataset(args.dataset or SENTENCE_PAIRS_PATH, split=None, text_column=args.text_column,
                                 label_column=args.label_column)  # fmt: skip
        if "test" not in data:
            train_rows, test_rows = balanced_split(list(data["train"]["label"]), 0.25, args.seed)
            data = {"train": data["train"].select(train_rows.tolist()), "test": data["train"].select(test_rows.tolist())}
        for split, limit in (("train", args.max_train_samples), ("test", args.max_eval_samples)):
            if limit is not None and limit < len(data[split]):
                data[split] = data[split].select(balanced_subset(list(data[split]["label"]), limit, args.seed).tolist())
        column = "text"  # the loaders name the columns `text` / `image` and `label` (hf_contrast.data.columns)
    else:
        size = int(encoder.data_config["input_size"][-1])
        data = load_images(args.dataset, SimpleNamespace(**vars(args), image_size=size), args.max_train_samples, args.max_eval_samples)
        column = "image"
    encode = dict(input_column=column, label_column="label", batch_size=args.batch_size, output=args.representation)
    probe = ProbeEvaluator(data["train"], data["test"], knn_k=min(args.knn_k, len(data["train"])), seed=args.seed, **encode)
    results = {**probe(encoder), "num_train": len(data["train"]), "num_test": len(data["test"])}
    test_z, test_y = encode_dataset(encoder, data["test"], **encode)  # for the picture
    output_dir = args.output_dir or (
        os.path.join(args.model, "linear_probe") if os.path.isdir(args.model) else "outputs/linear_probe"
    )
    name = os.path.basename(os.path.normpath(args.model))
    write_results(output_dir, f"{name} ({args.representation})", results)
    save_plots(output_dir, name, z=test_z, labels=test_y, names=class_names(data["train"], "label"), seed=args.seed)


if __name__ == "__main__":
    main()
