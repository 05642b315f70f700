"""What the example scripts share that is not library API: the two-step argument parsing, the image
data with a held-out split, and writing ``results.json`` and the pictures.

Everything a user needs in their own code (encode a dataset, evaluate, the model card, the Hub) is in
``hf_contrast``; this file only keeps the scripts short. The scripts import it as a sibling module, so
copy it along with the script you start from.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import HfArgumentParser

from hf_contrast.objectives import available_objectives, get_objective
from hf_contrast.training import ContrastiveTrainingArguments

#: ``TrainingArguments`` defaults every example changes (each script adds its own; any flag overrides them).
COMMON_DEFAULTS: dict[str, Any] = {
    "report_to": "none",  # no tracker unless asked (`--report_to tensorboard`)
    "save_strategy": "no",  # the final encoder is saved by `trainer.save_model()`; ask for checkpoints explicitly
    "logging_steps": 10,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,  # a float < 1 is a fraction of the total steps
    "dataloader_num_workers": 0,
    "seed": 0,
}


def parse_args(script_class: type, defaults: Mapping[str, Any], method: str) -> tuple[Any, ContrastiveTrainingArguments, Any]:
    """Parse ``sys.argv`` into ``(script_args, training_args, method_config)``.

    ``--method`` is read first, so that the parser also holds every hyperparameter flag of that method
    (the fields of ``get_objective(method).config_class``; ``--help`` lists them). ``defaults`` change
    the default of any field of the three dataclasses (a default naming a field the chosen method does
    not have is dropped); every flag still overrides them. A single ``.json`` argument is read as a
    config file. A default ``output_dir`` may name fields of ``script_class`` or of the method's config
    (``"outputs/{method}"``, ``"outputs/local-{contrastive}"``).
    """
    config_file = sys.argv[1] if len(sys.argv) == 2 and sys.argv[1].endswith(".json") else None
    if config_file:
        with open(config_file, encoding="utf-8") as handle:
            given = json.load(handle)
        method = given.get("method", method)
    else:
        first = argparse.ArgumentParser(add_help=False)
        first.add_argument("--method", default=method, choices=available_objectives())
        method = first.parse_known_args()[0].method
    config_class = get_objective(method).config_class
    parser = HfArgumentParser((script_class, ContrastiveTrainingArguments, config_class))
    known = {action.dest for action in parser._actions}
    defaults = {**COMMON_DEFAULTS, **{k: v for k, v in defaults.items() if k in known}, "method": method}
    if not _has_accelerator():  # several CPU processes (`accelerate launch --num_processes 2`) then use gloo DDP
        defaults.setdefault("use_cpu", True)
    parser.set_defaults(**defaults)
    if config_file:
        script, args, config = parser.parse_dict({**defaults, **given})
    else:
        script, args, config, rest = parser.parse_args_into_dataclasses(return_remaining_strings=True)
        if rest:  # e.g. `--n_splits` with `--method simclr`
            fields = sorted(f.name for f in dataclasses.fields(config_class))
            parser.error(f"unrecognized arguments: {' '.join(rest)} (the hyperparameters of --method {method} are {fields})")
    if args.output_dir == defaults.get("output_dir"):
        args.output_dir = args.output_dir.format(**{**vars(config), **vars(script)})
    return script, args, config


def _has_accelerator() -> bool:
    """Whether torch sees a GPU / MPS / XPU device."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


# ---- data -----------------------------------------------------------------------------------------


def load_images(
    dataset: str | None,
    args: Any,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    test_fraction: float = 0.2,
) -> Any:
    """``DatasetDict(train=..., test=...)``: the embedded digits (``dataset=None``), an image folder or a Hub id.

    ``args`` gives ``image_column``, ``label_column``, ``image_size`` and ``seed`` (the training arguments);
    the loaded columns are named ``image`` and ``label``, and ``args.image_column`` / ``args.label_column``
    are set to them.
    Data without a ``test`` (or ``validation``) split gets a seeded stratified ``test_fraction`` split;
    ``max_*_samples`` keep a seeded class-balanced subset (quick runs). A class-sorted split (an image
    folder) is fine: nothing here takes "the first rows".
    """
    import datasets

    from hf_contrast.data import load_digits_dataset, load_image_dataset
    from hf_contrast.evaluation import balanced_split, balanced_subset

    column, label = args.image_column, args.label_column
    if dataset in (None, "", "digits"):
        data = load_digits_dataset(image_size=max(8, args.image_size or 32), seed=args.seed)
    else:
        try:
            data = load_image_dataset(dataset, split=None, image_column=column, label_column=label)
        except (ConnectionError, OSError) as error:  # offline / unknown Hub id: say what to pass instead
            raise SystemExit(
                f"Could not load the dataset `{dataset}` ({type(error).__name__}: {error}).\nOffline, pass a local "
                "image folder instead (`--dataset path/to/folder`, one sub-folder per class), or drop `--dataset` "
                "to use the embedded scikit-learn digits."
            ) from error
    # the loaders name the columns `image` and `label` (hf_contrast.data.columns): the trainer and the
    # evaluators read those from now on
    column, label = args.image_column, args.label_column = "image", "label"
    if "test" not in data and "validation" in data:
        data["test"] = data.pop("validation")
    if "test" not in data:
        train_rows, test_rows = balanced_split(list(data["train"][label]), test_fraction, args.seed)
        data = datasets.DatasetDict({"train": data["train"].select(train_rows.tolist()), "test": data["train"].select(test_rows.tolist())})
    data = datasets.DatasetDict({"train": data["train"], "test": data["test"]})
    for split, limit in (("train", max_train_samples), ("test", max_eval_samples)):
        if limit is not None and limit < len(data[split]):
            data[split] = data[split].select(balanced_subset(list(data[split][label]), limit, args.seed).tolist())
    return data


def class_names(dataset: Any, label_column: str) -> list[str] | None:
    """The ``ClassLabel`` names of ``label_column`` (folder names of an image folder), if it has them."""
    feature = getattr(dataset, "features", {}).get(label_column)
    return list(feature.names) if hasattr(feature, "names") else None


# ---- the end of a run -----------------------------------------------------------------------------


@torch.no_grad()
def augmented_embeddings(model: Any, evaluator: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``f(x)`` and ``[f(a_k(x))]`` of an :class:`~hf_contrast.evaluation.EquivarianceEvaluator`'s fixed batch
    under its seeded augmentations (for the cosine histogram), in eval mode. Shape: ``(n, D)`` each."""
    was_training = model.training
    model.eval()
    try:
        return evaluator.embeddings(model)
    finally:
        model.train(was_training)


def final_evaluation(trainer: Any) -> dict[str, float]:
    """The trainer's evaluation of the final model, with the names the model card uses (no ``eval_`` prefix,
    no timings): its ``compute_metrics`` on the evaluation views (alignment, uniformity, …) and its
    ``evaluator`` (the probes fitted on the training split, …).

    The evaluation logged at the last step is reused when it saw the final weights (no best checkpoint
    reloaded); otherwise ``trainer.evaluate()`` runs. Call it on every process.
    """
    history = trainer.state.log_history
    logged = next((entry for entry in reversed(history) if any(key.startswith("eval_") for key in entry)), None)
    if logged is None or logged.get("step") != trainer.state.global_step or trainer.args.load_best_model_at_end:
        logged = trainer.evaluate()
    timings = ("_runtime", "_samples_per_second", "_steps_per_second")
    return {key.removeprefix("eval_"): value for key, value in logged.items() if key.startswith("eval_") and not key.endswith(timings)}


def write_results(output_dir: str, title: str, results: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``results.json`` (non-finite numbers left out, with a warning) and print the table."""
    bad = [k for k, v in results.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        warnings.warn(f"Not written to results.json (not finite): {bad}", RuntimeWarning, stacklevel=2)
    results = {k: v for k, v in results.items() if k not in bad}
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "results.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
    width = max(len(k) for k in results)
    print(f"\n***** {title}: final metrics (written to {path}) *****")
    for key, value in results.items():
        print(f"  {key:<{width}} = {value:.4f}" if isinstance(value, float) else f"  {key:<{width}} = {value}")
    return results


def save_plots(
    output_dir: str,
    title: str,
    log_history: Sequence[Mapping[str, Any]] | None = None,
    z: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    names: Sequence[str] | None = None,
    f: torch.Tensor | None = None,
    f_a: Sequence[torch.Tensor] | None = None,
    projection: str = "pca",
    seed: int = 0,
) -> list[Path]:
    """Draw ``embeddings.png``, ``augmentation_cosines.png``, ``loss_curves.png`` and ``eval_curves.png``
    from what is given; a picture that cannot be drawn is skipped with a warning."""
    from hf_contrast import plots

    out = Path(output_dir)
    jobs = []
    if z is not None:
        jobs.append(("embeddings.png", lambda p: plots.plot_embedding_projection(
            z, labels, p, method=projection, seed=seed, class_names=names, title=f"{title}: {len(z)} test embeddings ({projection})")))
    if f is not None and f_a:
        jobs.append(("augmentation_cosines.png", lambda p: plots.plot_augmentation_cosine_histogram([f] * len(f_a), list(f_a), p)))
    if log_history:
        jobs.append(("loss_curves.png", lambda p: plots.plot_loss_curves(log_history, p, title=f"{title}: loss terms")))
        metrics = sorted({k for e in log_history for k in e if k.startswith("eval_") and not k.endswith(
            ("_runtime", "_per_second", "eval_loss"))})
        if metrics:
            jobs.append(("eval_curves.png", lambda p: plots.plot_metric_curves(log_history, p, metrics, title=f"{title}: evaluation")))
    written = []
    for index, (name, draw) in enumerate(jobs, 1):
        slow = " (t-SNE: a minute or two for a few thousand points)" if name == "embeddings.png" and projection == "tsne" else ""
        print(f"[{index}/{len(jobs)}] drawing {out / name}{slow}", flush=True)
        try:
            written.append(draw(out / name))
        except (ValueError, ImportError) as error:
            warnings.warn(f"{name} not drawn: {error}", RuntimeWarning, stacklevel=2)
    return written
