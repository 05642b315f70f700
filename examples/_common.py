"""What every example shares: argument parsing, data loading, frozen-feature evaluation, and the
end of a run (encoder, model card, ``results.json``, pictures, optional push to the Hub).

Not a public API: the scripts in this folder import it as a sibling module, so copy it along with
the script you start from.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import HfArgumentParser

from hf_contrast.training import ContrastiveTrainingArguments

#: Defaults every example changes from ``TrainingArguments`` (each script adds its own).
COMMON_DEFAULTS: dict[str, Any] = {
    "report_to": "none",  # no tracker unless asked (`--report_to tensorboard`)
    "save_strategy": "no",  # the final encoder is saved by `finish`; ask for checkpoints explicitly
    "logging_steps": 10,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,  # a float < 1 is a fraction of the total steps
    "dataloader_num_workers": 0,
    "seed": 0,
}


#: ``results.json`` entries that describe the run rather than measure the model (kept out of the card's metrics).
BOOKKEEPING = frozenset({"train_steps", "train_runtime_seconds", "imbalance_ratio", "skipped_batches", "num_train", "num_test"})


def parse_arguments(data_class: type, defaults: Mapping[str, Any]) -> tuple[Any, ContrastiveTrainingArguments]:
    """Parse ``sys.argv`` into the script's data/model dataclass and ``ContrastiveTrainingArguments``.

    ``defaults`` change the default of any training argument (so a bare ``python run_x.py`` runs a
    sensible job) while every ``TrainingArguments`` flag (``--max_steps``, ``--output_dir``,
    ``--push_to_hub`` …) still overrides them. A single ``.json`` argument is read as a config file.
    A default ``output_dir`` may name fields of ``data_class`` (``"outputs/{method}"``).
    """
    parser = HfArgumentParser((data_class, ContrastiveTrainingArguments))
    defaults = {**COMMON_DEFAULTS, **defaults}
    if not _has_accelerator():  # several CPU processes (`accelerate launch --num_processes 2`) then use gloo DDP
        defaults.setdefault("use_cpu", True)
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(defaults) - known)
    if unknown:  # a renamed TrainingArguments field would otherwise be silently ignored
        raise ValueError(f"Unknown default argument(s) {unknown}: not fields of the parsed dataclasses.")
    parser.set_defaults(**defaults)
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):  # the same defaults, then the file's values
        with open(sys.argv[1], encoding="utf-8") as handle:
            data_args, training_args = parser.parse_dict({**defaults, **json.load(handle)})
    else:
        data_args, training_args = parser.parse_args_into_dataclasses()
    if training_args.output_dir == defaults.get("output_dir"):
        training_args.output_dir = training_args.output_dir.format(**vars(data_args))
    return data_args, training_args


def _has_accelerator() -> bool:
    """Whether torch sees a GPU / MPS / XPU device."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


# ---- data ----------------------------------------------------------------------------------------


def load_image_dataset(
    name: str | None,
    image_size: int,
    seed: int,
    image_column: str = "image",
    label_column: str = "label",
    test_size: float = 0.2,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
) -> Any:
    """Train/test image data: the embedded digits, a local image folder, or a Hub dataset.

    Args:
        name: ``None``/``"digits"`` (scikit-learn's digits, shipped offline), a directory in the
            ``imagefolder`` layout (one sub-folder per class), or a Hub dataset id.
        image_size: Side of the rendered digits (other datasets are resized by the views).
        seed: Seed of the train/test split when the data has no test split.
        image_column, label_column: Columns the trainer reads.
        test_size: Held-out fraction when the data has no ``test``/``validation`` split.
        max_train_samples, max_eval_samples: Keep a random subset of that many rows (quick runs).

    Returns:
        A ``datasets.DatasetDict`` with ``train`` and ``test``.
    """
    import datasets

    from hf_contrast.data import load_digits_dataset

    if name in (None, "", "digits"):
        return subsample(load_digits_dataset(image_size=max(8, image_size), test_size=test_size, seed=seed), seed, max_train_samples, max_eval_samples)
    if os.path.isdir(name):
        data = datasets.load_dataset("imagefolder", data_dir=name)
    else:
        try:
            data = datasets.load_dataset(name)
        except Exception as error:  # offline / unknown id: say what to pass instead
            raise SystemExit(
                f"Could not load the dataset `{name}` from the Hugging Face Hub ({type(error).__name__}: {error}).\n"
                "Offline, pass a local image folder instead (`--dataset path/to/folder` with one sub-folder per "
                "class), or drop `--dataset` to use the embedded scikit-learn digits."
            ) from error
    if "test" not in data:
        if "validation" in data:
            data["test"] = data.pop("validation")
        else:
            stratify = label_column if isinstance(data["train"].features.get(label_column), datasets.ClassLabel) else None
            data = data["train"].train_test_split(test_size=test_size, seed=seed, stratify_by_column=stratify)
    for column in (image_column, label_column):
        if column not in data["train"].column_names:
            raise SystemExit(
                f"The dataset has no column `{column}` (columns: {data['train'].column_names}); "
                "pass `--image_column` / `--label_column`."
            )
    return subsample(datasets.DatasetDict({"train": data["train"], "test": data["test"]}), seed, max_train_samples, max_eval_samples)


def subsample(data: Any, seed: int, max_train_samples: int | None, max_eval_samples: int | None) -> Any:
    """Keep a seeded random subset of ``max_train_samples`` train and ``max_eval_samples`` test rows."""
    for split, limit in (("train", max_train_samples), ("test", max_eval_samples)):
        if limit is not None and limit < len(data[split]):
            data[split] = data[split].shuffle(seed=seed).select(range(limit))
    return data


def class_names(dataset: Any, label_column: str) -> list[str] | None:
    """The ``ClassLabel`` names of ``label_column``, if it has them."""
    feature = dataset.features.get(label_column)
    return list(feature.names) if hasattr(feature, "names") else None


def sized_image_encoder(model: str, pretrained: bool, image_size: int | None, **config_kwargs: Any) -> Any:
    """A timm ``ContrastiveEncoder`` whose saved preprocessing uses the training image size.

    ``config_kwargs`` are ``ContrastiveEncoderConfig`` options (``projection_dim``…).
    """
    from hf_contrast.models import ContrastiveEncoder, HubUnavailableError

    try:
        encoder = ContrastiveEncoder.from_backbone(model, pretrained=pretrained, **config_kwargs)
    except HubUnavailableError as error:
        raise SystemExit(f"{error}\nOr drop `--pretrained` to train `{model}` from scratch.") from error
    if image_size is not None:
        config = dict(encoder.config.data_config)
        config["input_size"] = [int(config["input_size"][0]), image_size, image_size]
        encoder.config.data_config = config
    return encoder


# ---- frozen-feature evaluation -----------------------------------------------------------------


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def encode_images(
    encoder: Any, images: Sequence[Any], batch_size: int = 256, transform: Any = None
) -> dict[str, Tensor]:
    """``embeddings`` and ``projections`` of images through the deterministic evaluation transform.

    Shape: ``(n, F)`` and ``(n, P)``, float32 on the CPU.
    """
    from hf_contrast.augment import eval_transform_from_data_config

    transform = transform or eval_transform_from_data_config(encoder.data_config)
    was_training = encoder.training
    encoder.eval()
    out: dict[str, list[Tensor]] = {"embeddings": [], "projections": []}
    for start in range(0, len(images), batch_size):
        pixels = torch.stack([transform(img) for img in images[start : start + batch_size]]).to(_device(encoder))
        result = encoder(pixel_values=pixels)
        for key in out:
            out[key].append(result[key].float().cpu())
    encoder.train(was_training)
    return {key: torch.cat(values) for key, values in out.items()}


def encode_splits(
    encoder: Any, train: Any, test: Any, args: ContrastiveTrainingArguments
) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor, Tensor]:
    """Frozen features and labels of the train and test splits (the final evaluation of the image examples).

    Returns:
        ``(train_out, test_out, train_y, test_y)``: :func:`encode_images` outputs and ``(n,)`` labels.
    """
    column, label = args.image_column, args.label_column
    train_out = encode_images(encoder, train[column], args.per_device_eval_batch_size)
    test_out = encode_images(encoder, test[column], args.per_device_eval_batch_size)
    return train_out, test_out, torch.tensor(train[label]), torch.tensor(test[label])


@torch.no_grad()
def encode_texts(encoder: Any, texts: Sequence[str], batch_size: int = 64, max_length: int = 128) -> dict[str, Tensor]:
    """``embeddings`` and ``projections`` of sentences (no dropout). Shape: ``(n, F)``, ``(n, P)``."""
    was_training = encoder.training
    encoder.eval()
    out: dict[str, list[Tensor]] = {"embeddings": [], "projections": []}
    for start in range(0, len(texts), batch_size):
        batch = encoder.tokenizer(
            list(texts[start : start + batch_size]), padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        result = encoder(**{k: v.to(_device(encoder)) for k, v in batch.items()})
        for key in out:
            out[key].append(result[key].float().cpu())
    encoder.train(was_training)
    return {key: torch.cat(values) for key, values in out.items()}


@torch.no_grad()
def sampled_augmentations(
    encoder: Any,
    images: Sequence[Any],
    num_augmentations: int = 8,
    seed: int = 0,
    representation: str = "projections",
) -> tuple[Tensor, list[Tensor]]:
    """``f(x)`` and ``[f(a_1(x)), …]``: each ``a_k`` is ONE SimCLR augmentation applied to every image.

    ``x`` is the image resized to the training size (no crop), ``a_k`` is drawn under a seeded,
    forked RNG (training randomness untouched), as CARE's Figures 2c, 5 and 6 use them.

    Shape: ``(n, D)`` each.
    """
    from torchvision.transforms import v2

    from hf_contrast.augment import simclr_transform_from_data_config
    from hf_contrast.training import raw_image_transform

    config = encoder.data_config
    channels, height, width = config["input_size"]
    raw = torch.stack([raw_image_transform((height, width), n_channels=channels)(img) for img in images])
    identity = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(config["mean"]), list(config["std"]))])
    augment = simclr_transform_from_data_config(config)
    was_training = encoder.training
    encoder.eval()

    def embed(pixels: Tensor) -> Tensor:
        return encoder(pixel_values=pixels.as_subclass(Tensor).to(_device(encoder)))[representation].float().cpu()

    f = embed(identity(raw))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        views = [augment(raw) for _ in range(num_augmentations)]  # one parameter draw per call
    f_a = [embed(view) for view in views]
    encoder.train(was_training)
    return f, f_a


@torch.no_grad()
def sampled_text_augmentations(
    encoder: Any,
    texts: Sequence[str],
    num_augmentations: int = 8,
    seed: int = 0,
    representation: str = "projections",
    max_length: int = 128,
) -> tuple[Tensor, list[Tensor]]:
    """``f(x)`` and ``[f(a_1(x)), …]`` for sentences: each ``a_k`` is ONE token edit (delete / insert /
    mask at the same relative position) applied to every sentence, drawn under a seeded, forked RNG.

    Shape: ``(n, D)`` each.
    """
    from hf_contrast.augment import ChunkedTextAugmentation

    tokenizer = encoder.tokenizer
    batch = dict(tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt"))
    augment = ChunkedTextAugmentation.from_tokenizer(tokenizer, 1)  # one chunk: the whole batch shares the edit
    was_training = encoder.training
    encoder.eval()

    def embed(inputs: Mapping[str, Tensor]) -> Tensor:
        return encoder(**{k: v.to(_device(encoder)) for k, v in inputs.items()})[representation].float().cpu()

    f = embed(batch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        views = [augment(batch)[0] for _ in range(num_augmentations)]
    f_a = [embed(view) for view in views]
    encoder.train(was_training)
    return f, f_a


def equivariance_metrics(f: Tensor, f_a: Sequence[Tensor]) -> dict[str, float]:
    """Mean Wahba error (``W`` and ``W/√n``), γ_f and cos(f(x), f(a(x))) over sampled augmentations."""
    from hf_contrast.metrics import relative_rotational_equivariance, wahba_error

    wahba = [wahba_error(f, fa, normalize=True) for fa in f_a]
    gammas = [g for g in (relative_rotational_equivariance(f, fa, normalize=True) for fa in f_a) if math.isfinite(g)]
    cosines = torch.cat([F.cosine_similarity(f, fa, dim=1) for fa in f_a])
    return {
        "wahba_error": sum(w.error for w in wahba) / len(wahba),
        "wahba_error_per_sample": sum(w.error_per_sample for w in wahba) / len(wahba),
        "relative_rotational_equivariance": sum(gammas) / len(gammas) if gammas else float("nan"),
        "augmentation_cosine_mean": float(cosines.mean()),
    }


def knn_predict(train_z: Tensor, train_y: Tensor, test_z: Tensor, k: int = 20, temperature: float = 0.07) -> Tensor:
    """Weighted cosine kNN predictions (the vote of ``hf_contrast.metrics.knn_accuracy``). Shape: ``(m,)``."""
    sim = F.normalize(test_z.float(), dim=1) @ F.normalize(train_z.float(), dim=1).T
    top, index = sim.topk(min(k, train_z.shape[0]), dim=1)
    votes = torch.zeros(test_z.shape[0], int(train_y.max()) + 1)
    votes.scatter_add_(1, train_y[index], (top / temperature).exp())
    return votes.argmax(dim=1)


def linear_probe_predict(train_z: Tensor, train_y: Tensor, test_z: Tensor, seed: int = 0) -> Tensor:
    """Predictions of a standardised multinomial logistic regression (scikit-learn). Shape: ``(m,)``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed))
    probe.fit(train_z.double().numpy(), train_y.numpy())
    return torch.from_numpy(probe.predict(test_z.double().numpy()))


def accuracy_and_macro_f1(prefix: str, y_true: Tensor, y_pred: Tensor) -> dict[str, float]:
    """``{prefix}_accuracy`` and ``{prefix}_macro_f1`` (the unweighted mean of the per-class F1)."""
    from hf_contrast.metrics import macro_f1

    return {f"{prefix}_accuracy": float((y_true == y_pred).double().mean()), f"{prefix}_macro_f1": macro_f1(y_pred, y_true)}


# ---- the end of a run ----------------------------------------------------------------------------


def print_results(title: str, results: Mapping[str, float]) -> None:
    """Print the final metrics as an aligned table."""
    width = max(len(k) for k in results)
    print(f"\n***** {title} *****")
    for key, value in results.items():
        print(f"  {key:<{width}} = {value:.4f}" if isinstance(value, float) else f"  {key:<{width}} = {value}")


def finite_results(results: Mapping[str, Any]) -> dict[str, Any]:
    """``results`` with non-finite numbers dropped (a warning names them): ``results.json`` stays valid."""
    bad = [k for k, v in results.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        warnings.warn(f"Not written to results.json (not finite): {bad}", RuntimeWarning, stacklevel=2)
    return {k: v for k, v in results.items() if k not in bad}


def save_plots(
    output_dir: str,
    log_history: Sequence[Mapping[str, Any]] | None,
    z: Tensor | None = None,
    labels: Tensor | None = None,
    f: Tensor | None = None,
    f_a: Sequence[Tensor] | None = None,
    projection: str = "pca",
    title: str = "",
) -> list[Path]:
    """Write the pictures a researcher looks at; each one is skipped with a warning if it cannot be drawn."""
    from hf_contrast import plots

    jobs = []
    if z is not None:
        jobs.append(
            ("embeddings.png", lambda p: plots.plot_embedding_projection(z, labels, p, method=projection, title=f"{title} test embeddings ({projection})"))
        )
    if f is not None and f_a:
        jobs.append(("augmentation_cosines.png", lambda p: plots.plot_augmentation_cosine_histogram(list([f] * len(f_a)), list(f_a), p)))
    if log_history:
        jobs.append(("loss_curves.png", lambda p: plots.plot_loss_curves(log_history, p, title=f"{title} loss terms")))
    written = []
    for name, draw in jobs:
        try:
            written.append(draw(Path(output_dir) / name))
        except (ValueError, ImportError) as error:
            warnings.warn(f"{name} not drawn: {error}", RuntimeWarning, stacklevel=2)
    return written


def finish(
    trainer: Any,
    results: Mapping[str, Any],
    *,
    title: str,
    datasets: list[str],
    training_data: str,
    plots: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Save the encoder, its model card, ``results.json`` and the pictures; push if asked.

    Call on every process after the last collective step (only the main process writes).

    Args:
        trainer: The finished trainer (its model, args, loss and logs are read).
        results: Final metrics (floats); non-finite ones are left out of ``results.json``.
        title: Method name for the card and the printout.
        datasets: Dataset names for the card metadata.
        training_data: One sentence about the training data for the card.
        plots: Keyword arguments of :func:`save_plots` (``z``, ``labels``, ``f``, ``f_a``).

    Returns:
        The results written.
    """
    from hf_contrast.hub import ContrastiveModelCardData, push_encoder_to_hub, write_model_card

    args = trainer.args
    results = finite_results(results)
    if not trainer.is_world_process_zero():
        return results
    encoder = trainer.accelerator.unwrap_model(trainer.model)
    encoder.save_pretrained(args.output_dir)  # config + safetensors (+ tokenizer of a text encoder)
    card = ContrastiveModelCardData.from_trainer(
        trainer,
        method=title,
        datasets=datasets,
        training_data=training_data,
        metrics={k: v for k, v in results.items() if k not in BOOKKEEPING},
        license="apache-2.0",
    )
    write_model_card(encoder, args.output_dir, card, overwrite=True)
    with open(os.path.join(args.output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
    save_plots(args.output_dir, trainer.state.log_history, title=title, **(plots or {}))
    print_results(f"{title}: final metrics (written to {os.path.join(args.output_dir, 'results.json')})", results)
    if args.push_to_hub:
        repo_id = args.hub_model_id or Path(args.output_dir).resolve().name
        commit = push_encoder_to_hub(encoder, repo_id, card_data=card, token=args.hub_token, private=args.hub_private_repo)
        print(f"Pushed to the Hub: {commit}")
    return results
