"""The trainer's callback that fills the card data while training (as sentence-transformers' does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from hf_contrast.hub.card_data import ContrastiveModelCardData
from hf_contrast.hub.card_storage import get_model_card_data
from hf_contrast.provenance import hub_id_or_none as _hub_id

__all__ = ["ModelCardCallback", "is_evaluation_log"]


def is_evaluation_log(logs: Mapping[str, Any]) -> bool:
    """Whether a ``Trainer.log`` entry is an evaluation (an ``eval_*`` key)."""
    return any(key.startswith("eval_") for key in logs)


class ModelCardCallback(TrainerCallback):
    """Fills ``trainer.model.model_card_data`` while training (add it at the end of the trainer's ``__init__``).

    The constructor starts a new run on the card data (:meth:`ContrastiveModelCardData.start_run`)
    and reads what the trainer knows at once (objective, datasets, evaluators, arguments: the
    trainer's ``on_init_end`` has fired by then); ``on_train_begin`` refreshes them, ``on_log``
    grows the log table, ``on_evaluate`` records metrics (step 0 = baseline), ``on_train_end``
    keeps the best checkpoint's metrics when ``load_best_model_at_end`` reloaded it. An evaluation after that (a
    ``trainer.evaluate()`` of the reloaded weights, which the Trainer logs at the last step) sets the metrics but not
    the last step's row of the log table: those are the best step's weights, whose row holds their evaluation.

    Args:
        trainer: A ``transformers.Trainer`` with ``model``, ``args``, ``train_dataset``,
            ``eval_dataset`` and ``objective`` (an ``nn.Module`` with ``name``, ``citation``,
            ``get_config_dict()``; a ``loss`` attribute is read when there is no ``objective``).
    """

    def __init__(self, trainer: Any) -> None:
        super().__init__()
        self.trainer = trainer
        #: The step whose weights ``load_best_model_at_end`` reloaded, when it is not the last one (else ``None``).
        self.reloaded_step: int | None = None
        self._data().start_run()
        self._describe_run()

    def _data(self) -> ContrastiveModelCardData:
        return get_model_card_data(self.trainer.model)

    def _describe_run(self) -> None:
        trainer, data = self.trainer, self._data()
        data.add_tags(["hf_contrast", "generated_from_trainer"])
        objective = getattr(trainer, "objective", None) or getattr(trainer, "loss", None)
        if objective is not None and not isinstance(objective, (int, float, str)):
            data.set_objective(objective)
        data.set_training_args(trainer.args)
        data.set_datasets(getattr(trainer, "train_dataset", None), getattr(trainer, "eval_dataset", None))
        data.set_evaluator(getattr(trainer, "evaluator", None))
        hub_model_id = getattr(trainer.args, "hub_model_id", None)
        if getattr(trainer.args, "push_to_hub", False) and hub_model_id and not data.model_id:
            data.model_id = _hub_id(hub_model_id)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reloaded_step = None
        self._describe_run()
        data = self._data()
        if state.log_history and not data.training_logs:  # resumed: the card's log and metrics start at step 1
            for entry in state.log_history:
                step = int(entry.get("step", 0))
                data.log(step, entry.get("epoch"), entry)
                if is_evaluation_log(entry):
                    data.set_metrics(entry, step)
        setup = getattr(self.trainer, "run_setup", None)  # what the trainer logged at the start of `train()`
        if setup:
            self._data().training_setup = {str(key): str(value) for key, value in setup.items()}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if self.reloaded_step is not None and logs and is_evaluation_log(logs):
            return  # an evaluation of the reloaded best step's weights, not of the last step's
        if logs:
            self._data().log(state.global_step, state.epoch, logs)

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None, **kwargs: Any
    ) -> None:
        if metrics:
            self._data().set_metrics(metrics, state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        best_step = getattr(state, "best_global_step", None)
        if not (args.load_best_model_at_end and best_step):
            return
        data = self._data()
        data.best_model_step = int(best_step)
        if best_step != state.global_step:
            self.reloaded_step = int(best_step)
        for entry in state.log_history:
            if entry.get("step") == best_step and is_evaluation_log(entry):
                data.set_metrics(entry, best_step)
