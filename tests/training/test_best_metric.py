"""``metric_for_best_model`` checked before training against what the run's evaluations report."""

from __future__ import annotations

import warnings

import pytest
from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder

from hf_contrast.errors import InputError
from hf_contrast.evaluation import EmbeddingEvaluator, EmbeddingMetrics, ProbeEvaluator, SequentialEvaluator
from hf_contrast.objectives import SimOObjective
from hf_contrast.training import ContrastiveTrainer, SimCLRTrainer, SimOTrainer
from hf_contrast.training.checks import check_best_metric


def _trainer(tmp_path, metric: str | None, evaluator=None, eval_dataset=None, **kwargs) -> ContrastiveTrainer:  # noqa: ANN001
    data = image_dataset(n=16, size=16, n_classes=2)
    args = training_args(
        tmp_path, per_device_train_batch_size=8, eval_strategy="steps", eval_steps=1, save_strategy="steps",
        save_steps=1, metric_for_best_model=metric,
    )  # fmt: skip
    return SimCLRTrainer(
        model=vit_encoder(), args=args, train_dataset=data, evaluator=evaluator,
        eval_dataset=data if eval_dataset is None else eval_dataset, **kwargs,
    )  # fmt: skip


def _evaluators():  # noqa: ANN202
    data = image_dataset(n=16, size=16, n_classes=2)
    return SequentialEvaluator([
        ProbeEvaluator(data, data, knn_k=3, progress=False),
        EmbeddingEvaluator(data, metrics=EmbeddingMetrics(knn_k=3, progress=False), progress=False),
    ])  # fmt: skip


@pytest.mark.parametrize("sets", [None, ("a", "b"), ("a", "unlabelled")])
def test_every_metric_an_evaluation_reports_is_accepted(tmp_path, sets) -> None:  # noqa: ANN001
    labelled = image_dataset(n=16, size=16, n_classes=2)
    eval_dataset = (
        None
        if sets is None
        else {name: labelled.remove_columns("label") if name == "unlabelled" else labelled for name in sets}
    )
    trainer = _trainer(tmp_path, "eval_loss" if sets is None else "eval_a_loss", _evaluators(), eval_dataset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a random encoder's representation may have collapsed, and say so
        reported = trainer.evaluate()
    assert any(key.endswith("_linear_probe_accuracy") for key in reported)
    for key in [key for key in reported if key.startswith("eval_")]:
        for name in (key, key.removeprefix("eval_")):  # transformers adds a missing `eval_`
            trainer.args.metric_for_best_model = name
            check_best_metric(trainer)
    if sets and "unlabelled" in sets:  # what an unlabelled set cannot report is refused, the labelled set's is not
        assert "eval_a_knn_loo_accuracy" in reported and "eval_unlabelled_knn_loo_accuracy" not in reported
        trainer.args.metric_for_best_model = "eval_unlabelled_knn_loo_accuracy"
        with pytest.raises(InputError, match="no 'eval_unlabelled_knn_loo_accuracy'"):
            check_best_metric(trainer)


@pytest.mark.parametrize("unlabel", ["no label column", "only -1 labels"])
def test_a_labelled_metric_of_an_unlabelled_evaluation_set_is_refused(tmp_path, unlabel) -> None:  # noqa: ANN001
    """An evaluation set without labels reports no kNN, probe or class metric: asking for one stopped the run at
    its first evaluation (transformers' KeyError), past the start-up check, which took every set as labelled."""
    data = image_dataset(n=16, size=16, n_classes=2)
    if unlabel == "no label column":
        unlabelled = data.remove_columns("label")
    else:
        unlabelled = data.map(lambda row: {"label": -1})
    trainer = _trainer(tmp_path, "knn_loo_accuracy", eval_dataset=unlabelled)
    with pytest.raises(InputError, match="no 'eval_knn_loo_accuracy'.*can report: eval_loss, eval_alignment"):
        trainer.train()
    assert trainer.state.global_step == 0
    trainer.args.metric_for_best_model = "uniformity"
    check_best_metric(trainer)


def test_a_metric_no_evaluation_reports_is_refused_before_training(tmp_path) -> None:
    trainer = _trainer(
        tmp_path, "eval_probe_linear_accuracy", ProbeEvaluator(image_dataset(n=16), image_dataset(n=16))
    )
    with pytest.raises(InputError) as error:
        trainer.train()
    message = str(error.value)
    assert "`metric_for_best_model`='eval_probe_linear_accuracy'" in message
    assert "Did you mean 'eval_linear_probe_accuracy'?" in message
    assert "eval_loss, eval_alignment, eval_uniformity" in message and "eval_knn_macro_f1." in message
    assert trainer.state.global_step == 0 and not list(tmp_path.iterdir())  # no step, nothing written
    trainer = _trainer(tmp_path, "sts_spearman")  # an evaluator's metric, without that evaluator
    with pytest.raises(InputError, match="no 'eval_sts_spearman'"):
        check_best_metric(trainer)
    trainer = _trainer(tmp_path, "loss", eval_dataset={"a": image_dataset(n=16)})  # one of several sets: its name
    with pytest.raises(InputError, match="no 'eval_loss'.* Did you mean 'eval_a_loss'"):
        check_best_metric(trainer)


def test_a_method_without_eval_loss_is_not_offered_one(tmp_path) -> None:
    data = image_dataset(n=16, size=16, n_classes=8)
    args = training_args(tmp_path, per_device_train_batch_size=4, eval_strategy="steps", metric_for_best_model="loss")
    simo = SimOObjective(classes_per_batch=2, samples_per_class=2)
    trainer = SimOTrainer(model=vit_encoder(), args=args, train_dataset=data, eval_dataset=data, objective=simo)
    with pytest.raises(InputError, match="no 'eval_loss'") as error:
        check_best_metric(trainer)
    assert "eval_loss," not in str(error.value)  # not in the list it offers either
    assert "SimOObjective has no `eval_loss`; transformers sets 'loss' when" in str(error.value)
    args = training_args(tmp_path, per_device_train_batch_size=4, eval_strategy="steps",
                         lr_scheduler_type="reduce_lr_on_plateau")  # fmt: skip
    assert args.metric_for_best_model == "loss"  # transformers' choice: its plateau steps on it at each evaluation
    trainer = SimOTrainer(model=vit_encoder(), args=args, train_dataset=data, eval_dataset=data, objective=simo)
    with pytest.raises(InputError, match="`metric_for_best_model`='loss'.*SimOObjective has no `eval_loss`"):
        trainer.train()


def test_names_the_run_cannot_know_before_an_evaluation_are_left_to_transformers(tmp_path) -> None:
    def mine(prediction) -> dict[str, float]:  # noqa: ANN001
        return {"mine": 1.0}

    class Unsaid:  # an evaluator of the user's: a callable that does not say its keys
        def __call__(self, model) -> dict[str, float]:  # noqa: ANN001
            return {"score": 1.0}

    check_best_metric(_trainer(tmp_path, "eval_mine", compute_metrics=mine))
    check_best_metric(_trainer(tmp_path, "eval_score", Unsaid()))
    trainer = _trainer(tmp_path, "eval_anything")
    trainer.args.eval_strategy = "no"  # the run never evaluates: the name is never looked up
    check_best_metric(trainer)
    trainer.args.eval_strategy = "steps"
    with pytest.raises(InputError, match="no 'eval_anything'"):
        check_best_metric(trainer)
