"""``disable_tqdm`` and the Trainer's log level govern every progress bar and message the package prints."""

from __future__ import annotations

import logging
import warnings

from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder
from transformers.utils import logging as transformers_logging

from hf_contrast.evaluation import EmbeddingEvaluator, encode_dataset
from hf_contrast.training import SupConTrainer

BAR_NAMES = ("Encoding", "Embedding metrics", "Writing model shards")


def _run(tmp_path, disable_tqdm: bool) -> None:  # noqa: ANN001
    data = image_dataset(n=16)
    args = training_args(tmp_path, disable_tqdm=disable_tqdm, use_cpu=False, eval_strategy="steps", eval_steps=2)
    evaluator = EmbeddingEvaluator(data, batch_size=8, progress=True)  # asks for its "Encoding" and metrics bars
    trainer = SupConTrainer(model=vit_encoder(), args=args, train_dataset=data, eval_dataset=data, evaluator=evaluator)
    trainer.train()
    trainer.evaluate()
    trainer.save_model(str(tmp_path / "final"))


def test_disable_tqdm_silences_every_progress_bar_and_restores_the_switch(tmp_path, capfd) -> None:
    assert transformers_logging.is_progress_bar_enabled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(tmp_path, disable_tqdm=True)
    err = capfd.readouterr().err
    assert "it/s]" not in err and "s/it]" not in err and not any(name in err for name in BAR_NAMES), err
    assert transformers_logging.is_progress_bar_enabled()  # the user's setting is back
    # on a machine without an accelerator the package's loaders do not ask for pinned memory
    assert not [w for w in caught if "pin_memory" in str(w.message)]


def test_without_disable_tqdm_the_bars_show(tmp_path, capfd) -> None:
    _run(tmp_path, disable_tqdm=False)
    err = capfd.readouterr().err
    assert all(name in err for name in BAR_NAMES), err


def test_the_package_bars_follow_transformers_progress_switch(capfd) -> None:
    data = image_dataset(n=8)
    model = vit_encoder()
    transformers_logging.disable_progress_bar()
    try:
        encode_dataset(model, data, batch_size=4, progress=True)
    finally:
        transformers_logging.enable_progress_bar()
    assert "Encoding" not in capfd.readouterr().err
    encode_dataset(model, data, batch_size=4, progress=True)
    assert "Encoding" in capfd.readouterr().err


def test_the_package_bars_show_in_the_main_process_only(capfd, monkeypatch) -> None:
    """`accelerate launch --num_processes 2 run_bert.py` drew every "Encoding" bar twice, interleaved: the other
    processes' bars are off, as the Trainer's own are (here a launcher's `RANK`, before any process group)."""
    data = image_dataset(n=8)
    model = vit_encoder()
    monkeypatch.setenv("RANK", "1")
    encode_dataset(model, data, batch_size=4, progress=True)
    assert "Encoding" not in capfd.readouterr().err
    monkeypatch.setenv("RANK", "0")
    encode_dataset(model, data, batch_size=4, progress=True)
    assert "Encoding" in capfd.readouterr().err


def test_the_package_loggers_follow_the_trainers_log_level(tmp_path) -> None:
    package = logging.getLogger("hf_contrast")
    previous = package.level
    try:
        SupConTrainer(
            model=vit_encoder(), args=training_args(tmp_path, log_level="error"), train_dataset=image_dataset()
        )
        assert not logging.getLogger("hf_contrast.training.checkpointing").isEnabledFor(logging.WARNING)
        SupConTrainer(
            model=vit_encoder(), args=training_args(tmp_path, log_level="info"), train_dataset=image_dataset()
        )
        assert logging.getLogger("hf_contrast.metrics.embedding_metrics").isEnabledFor(logging.INFO)
    finally:
        package.setLevel(previous)
