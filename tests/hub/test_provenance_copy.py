"""A model fine-tuned from a local copy of a Hub model names that Hub model, and keeps its card's language."""

from __future__ import annotations

import logging
from pathlib import Path

from _tiny import tiny_bert_config, tiny_timm_encoder, tiny_tokenizer
from huggingface_hub import ModelCard
from transformers import BertModel

from hf_contrast.hub import generate_model_card, get_model_card_data
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.provenance import backbone_provenance

_CARD = """---
language: de
license: apache-2.0
base_model: org/grandparent-bert
---
# tiny-copy

```python
model = SentenceTransformer('{identity}')
tokenizer = AutoTokenizer.from_pretrained("{identity}")
```
"""


def _local_copy(folder: Path, card: str) -> Path:
    config = tiny_bert_config()
    config._name_or_path = "org/grandparent-bert"  # what the copy's config.json says (its own base)
    BertModel(config).save_pretrained(folder)
    tiny_tokenizer(folder).save_pretrained(folder)
    (folder / "README.md").write_text(card, encoding="utf-8")
    return folder


def test_local_copy_names_the_hub_model_its_card_loads_and_keeps_its_language(tmp_path: Path) -> None:
    folder = _local_copy(tmp_path / "tiny-copy", _CARD.format(identity="org/tiny-copy"))
    encoder = ContrastiveEncoder.from_backbone(str(folder), projection_dim=8)
    data = get_model_card_data(encoder)
    assert (encoder.config.backbone, data.base_model, data.license, data.language) == (
        "org/tiny-copy",
        "org/tiny-copy",
        "apache-2.0",
        "de",
    )
    meta = ModelCard(generate_model_card(encoder)).data
    assert (meta.base_model, meta.language, meta.license) == ("org/tiny-copy", "de", "apache-2.0")


def test_a_copy_that_does_not_say_what_it_is_warns_and_names_its_base(tmp_path: Path, caplog) -> None:
    two_ids = _CARD.format(identity="org/one").replace('from_pretrained("org/one")', 'from_pretrained("org/two")')
    folder = _local_copy(tmp_path / "unnamed", two_ids)  # two different ids: no single identity
    with caplog.at_level(logging.WARNING, logger="hf_contrast"):
        found = backbone_provenance(str(folder))
    assert (found.name, found.base_model, found.language) == ("unnamed", "org/grandparent-bert", "de")
    assert "pass `base_model='org/name'`" in caplog.text and "'unnamed'" in caplog.text
    assert backbone_provenance(str(folder), base_model="org/real").base_model == "org/real"  # the user's word wins


def test_model_index_names_hub_datasets_only() -> None:
    model = tiny_timm_encoder()
    data = get_model_card_data(model)
    data.evaluators = [
        {
            "prefix": "hub",
            "class": "ProbeEvaluator",
            "dataset_name": "Fashion-MNIST",
            "dataset_id": "zalando-datasets/fashion_mnist",
            "split": "test",
            "primary_metric": "hub_knn_accuracy",
        },
        {
            "prefix": "local",
            "class": "ProbeEvaluator",
            "dataset_name": "my-folder",
            "split": "test",
            "primary_metric": "local_knn_accuracy",
        },
    ]
    data.set_metrics({"eval_hub_knn_accuracy": 0.5, "eval_local_knn_accuracy": 0.25}, step=4)
    text = generate_model_card(model)
    results = [(r.dataset_type, r.dataset_name, r.metric_type) for r in ModelCard(text).data.eval_results]
    assert results == [("zalando-datasets/fashion_mnist", "Fashion-MNIST", "knn_accuracy")]
    assert "### my-folder: `ProbeEvaluator`" in text  # the local metric is still reported in the card
