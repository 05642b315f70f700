"""Model cards and Hub uploads of hf_contrast encoders, the sentence-transformers way.

- Card data (:class:`ContrastiveModelCardData`) lives on the encoder as ``model.model_card_data``
  (:func:`get_model_card_data` creates it on first use). Users set ``license``, ``language``,
  ``model_name``, ``train_datasets``... on it; the trainers' :class:`ModelCardCallback` fills the rest:
  datasets, the objective (name, config, BibTeX), the evaluators, non-default training arguments
  (:func:`non_default_training_args`), the log table and the evaluation metrics (a step-0 evaluation is
  kept apart as the baseline).
- It travels with the model: :func:`save_card_data` writes ``hf_contrast/model_card.json``
  (``ContrastiveEncoder.save_pretrained``), :func:`load_card_data` reads it back (``from_pretrained``); a new
  training run replaces the previous run's fields.
- :func:`generate_model_card` renders ``model_cards/model_card_template.md``; what depends on the backbone
  family comes from the model (``model.card_facts()``, an :class:`EncoderCardFacts`).
  :func:`write_model_card` is what ``save_pretrained`` calls; a README.md without :data:`GENERATED_MARKER`
  was written by a person and is kept.
- :func:`upload_model_folder` is the one upload path (``ContrastiveEncoder.push_to_hub``,
  :func:`push_encoder_to_hub`, the trainers' pushes); :func:`staged_directory` makes a save all-or-nothing.

This package does not import ``hf_contrast.models`` (the models write cards; the dependency goes the other
way): the model is duck-typed.
"""

from __future__ import annotations

from hf_contrast.hub.card_callback import ModelCardCallback
from hf_contrast.hub.card_data import CARD_DATA_VERSION, ContrastiveModelCardData
from hf_contrast.hub.card_datasets import dataset_metadata
from hf_contrast.hub.card_facts import EncoderCardFacts
from hf_contrast.hub.card_render import GENERATED_MARKER, generate_model_card, is_generated_card, write_model_card
from hf_contrast.hub.card_storage import CARD_DATA_FILE, get_model_card_data, load_card_data, save_card_data
from hf_contrast.hub.layout import HUB_SUBFOLDER
from hf_contrast.hub.push import push_encoder_to_hub, save_and_push
from hf_contrast.hub.staging import staged_directory
from hf_contrast.hub.training_args import non_default_training_args
from hf_contrast.hub.upload import hub_readme_is_user_written, upload_model_folder

__all__ = [
    "CARD_DATA_FILE",
    "CARD_DATA_VERSION",
    "GENERATED_MARKER",
    "HUB_SUBFOLDER",
    "ContrastiveModelCardData",
    "EncoderCardFacts",
    "ModelCardCallback",
    "dataset_metadata",
    "generate_model_card",
    "get_model_card_data",
    "hub_readme_is_user_written",
    "is_generated_card",
    "load_card_data",
    "non_default_training_args",
    "push_encoder_to_hub",
    "save_and_push",
    "save_card_data",
    "staged_directory",
    "upload_model_folder",
    "write_model_card",
]
