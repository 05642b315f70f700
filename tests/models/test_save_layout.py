"""The one save layout, after real training steps: every loader gives the same embeddings (1e-5).

timm encoder: ``ContrastiveEncoder.from_pretrained``, ``timm.create_model("local-dir:...")`` and
transformers' ``AutoModel`` on ``trainer.save_model``'s folder and on a checkpoint. Text encoder:
``from_pretrained``, ``AutoModel`` + the pooling, ``SentenceTransformer``. A sentence-transformers model
keeps its pooling, ``Normalize`` and ``max_seq_length`` in and out (issue 10).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
from _tiny import tiny_bert_config, tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from _tiny_trainer import RandomImages, TinyTrainer, tiny_args
from transformers import AutoModel, BertModel

from hf_contrast.models import HUB_SUBFOLDER, ContrastiveEncoder, mean_pool

sentence_transformers = pytest.importorskip("sentence_transformers")

SENTENCES = ["the cat sat on the mat", "hello world", "a red car", "the dog is a dog of the man " * 6]


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.detach().float(), want.detach().float(), atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------
# timm, trained with the Trainer
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_timm(tmp_path_factory) -> tuple[ContrastiveEncoder, Path]:
    output_dir = tmp_path_factory.mktemp("timm")
    torch.manual_seed(0)
    encoder = tiny_timm_encoder()
    encoder.set_image_size(32)  # what the trainer does with its image_size
    trainer = TinyTrainer(model=encoder, args=tiny_args(output_dir, max_steps=4), train_dataset=RandomImages())
    initial = encoder.projection_head.layers[0].weight.detach().clone()
    trainer.train()
    assert not torch.equal(initial, encoder.projection_head.layers[0].weight)  # it did train
    trainer.save_model()
    return encoder.eval(), output_dir


@pytest.mark.parametrize("folder", [".", "checkpoint-4"])
def test_timm_layout_loads_everywhere_after_training(trained_timm, folder: str) -> None:
    encoder, output_dir = trained_timm
    path = output_dir / folder
    images = RandomImages(n=3, seed=7).images
    expected = encoder(pixel_values=images)

    ours = ContrastiveEncoder.from_pretrained(path).eval()
    got = ours(pixel_values=images)
    _close(got.embeddings, expected.embeddings)
    _close(got.projections, expected.projections)

    native = timm.create_model(f"local-dir:{path}", pretrained=True).eval()
    _close(native(images), expected.embeddings)
    assert tuple(timm.data.resolve_model_data_config(native)["input_size"]) == (3, 32, 32)  # a list in older timm
    assert ours.data_config["input_size"] == (3, 32, 32)

    wrapped = AutoModel.from_pretrained(path).eval()
    _close(wrapped(pixel_values=images).pooler_output, expected.embeddings)
    pretrained_cfg = json.loads((path / "config.json").read_text())["pretrained_cfg"]
    assert "hf_hub_id" not in pretrained_cfg and "tag" not in pretrained_cfg  # trained from scratch


# ----------------------------------------------------------------------------------------------
# Text, trained with a few optimizer steps
# ----------------------------------------------------------------------------------------------


def _train_text(encoder: ContrastiveEncoder, steps: int = 3) -> None:
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.5)
    inputs = encoder.tokenizer(SENTENCES[:3], padding=True, return_tensors="pt")
    encoder.train()
    for _ in range(steps):
        z = encoder(**inputs).projections
        loss = (z @ z.T).pow(2).mean()  # push the sentences apart
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    encoder.eval()


def _tokens(encoder: ContrastiveEncoder) -> dict[str, torch.Tensor]:
    return dict(encoder.tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt"))


def test_text_layout_loads_everywhere_after_training(tmp_path) -> None:
    torch.manual_seed(0)
    encoder = tiny_text_encoder(tokenizer=tiny_tokenizer(tmp_path / "vocab"))
    before = encoder.backbone.embeddings.word_embeddings.weight.detach().clone()
    _train_text(encoder)
    assert not torch.equal(before, encoder.backbone.embeddings.word_embeddings.weight)
    encoder.save_pretrained(tmp_path / "model")
    inputs = _tokens(encoder)
    expected = encoder(**inputs)

    ours = ContrastiveEncoder.from_pretrained(tmp_path / "model").eval()
    _close(ours(**_tokens(ours)).projections, expected.projections)
    native = AutoModel.from_pretrained(tmp_path / "model").eval()
    _close(mean_pool(native(**inputs).last_hidden_state, inputs["attention_mask"]), expected.embeddings)
    st = sentence_transformers.SentenceTransformer(str(tmp_path / "model"), device="cpu")
    assert st.max_seq_length == 64
    _close(st.encode(SENTENCES, convert_to_tensor=True), expected.embeddings)


# ----------------------------------------------------------------------------------------------
# sentence-transformers models in and out
# ----------------------------------------------------------------------------------------------


def _st_model(folder: Path, pooling: str, normalize: bool, max_seq_length: int) -> Path:
    """A tiny BERT saved as a sentence-transformers model (Transformer -> Pooling [-> Normalize])."""
    torch.manual_seed(0)
    bert_dir = folder / "bert"
    BertModel(tiny_bert_config()).save_pretrained(bert_dir)
    tiny_tokenizer(bert_dir).save_pretrained(bert_dir)
    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        models = sentence_transformers.models
    transformer = models.Transformer(str(bert_dir), max_seq_length=max_seq_length)
    modules = [transformer, models.Pooling(32, pooling_mode=pooling)]
    if normalize:
        modules.append(models.Normalize())
    st_dir = folder / "st"
    sentence_transformers.SentenceTransformer(modules=modules, device="cpu").save(str(st_dir))
    return st_dir


@pytest.mark.parametrize(("pooling", "normalize"), [("cls", True), ("mean", False), ("max", True)])
def test_sentence_transformers_model_round_trip(tmp_path, pooling: str, normalize: bool) -> None:
    st_dir = _st_model(tmp_path, pooling, normalize, max_seq_length=12)
    original = sentence_transformers.SentenceTransformer(str(st_dir), device="cpu")
    assert original.max_seq_length == 12

    encoder = ContrastiveEncoder.from_backbone(str(st_dir), projection_dim=8).eval()
    assert (encoder.config.pooling, encoder.config.normalize_embeddings, encoder.config.max_seq_length) == (
        pooling,
        normalize,
        12,
    )
    assert encoder.tokenizer.model_max_length == 12  # truncates like sentence-transformers
    _close(encoder(**_tokens(encoder)).embeddings, original.encode(SENTENCES, convert_to_tensor=True))

    _train_text(encoder)
    encoder.save_pretrained(tmp_path / "fine_tuned")
    modules = json.loads((tmp_path / "fine_tuned" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling"] + ["Normalize"] * normalize
    assert json.loads((tmp_path / "fine_tuned" / "sentence_bert_config.json").read_text())["max_seq_length"] == 12
    fine_tuned = sentence_transformers.SentenceTransformer(str(tmp_path / "fine_tuned"), device="cpu")
    assert fine_tuned.max_seq_length == 12
    got = fine_tuned.encode(SENTENCES, convert_to_tensor=True)
    _close(got, encoder(**_tokens(encoder)).embeddings)
    assert not torch.allclose(got, original.encode(SENTENCES, convert_to_tensor=True), atol=1e-3)  # it did train
    if normalize:
        _close(got.norm(dim=-1), torch.ones(len(SENTENCES)))
    reloaded = ContrastiveEncoder.from_pretrained(tmp_path / "fine_tuned").eval()
    assert (reloaded.config.pooling, reloaded.config.normalize_embeddings, reloaded.config.max_seq_length) == (
        pooling,
        normalize,
        12,
    )


def test_explicit_pooling_overrides_a_sentence_transformers_model_with_a_warning(tmp_path, caplog) -> None:
    st_dir = _st_model(tmp_path, "cls", False, max_seq_length=12)
    with caplog.at_level("WARNING", logger="hf_contrast.models.modeling"):
        encoder = ContrastiveEncoder.from_backbone(str(st_dir), projection_dim=8, pooling="mean")
    assert encoder.config.pooling == "mean" and "`pooling='mean'` overrides" in caplog.text


def test_unsupported_sentence_transformers_modules_are_refused(tmp_path) -> None:
    st_dir = _st_model(tmp_path, "mean", False, max_seq_length=12)
    modules = json.loads((st_dir / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (st_dir / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(
        ValueError, match=r"has the modules \['Transformer', 'Pooling', 'Dense'\].*Transformer -> Pooling"
    ):
        ContrastiveEncoder.from_backbone(str(st_dir))
    modules.pop()
    (st_dir / "modules.json").write_text(json.dumps(modules))
    pooling_file = st_dir / "1_Pooling" / "config.json"
    for config, match in (
        (
            {"embedding_dimension": 32, "pooling_mode": "weightedmean"},
            r"sets \['weightedmean'\]",
        ),  # sentence-transformers >= 6
        (
            {"word_embedding_dimension": 32, "pooling_mode_weightedmean_tokens": True},
            "pooling_mode_weightedmean_tokens",
        ),
        ({"embedding_dimension": 32, "pooling_mode": ["mean", "max"]}, r"sets \['mean', 'max'\]"),
    ):
        pooling_file.write_text(json.dumps(config))
        with pytest.raises(ValueError, match=match):
            ContrastiveEncoder.from_backbone(str(st_dir))
    pooling_file.write_text(json.dumps({"word_embedding_dimension": 32, "pooling_mode_cls_token": True}))  # classic
    assert ContrastiveEncoder.from_backbone(str(st_dir)).config.pooling == "cls"


def test_save_over_a_model_replaces_it_and_keeps_other_files(tmp_path) -> None:
    target = tmp_path / "model"
    st_dir = _st_model(tmp_path, "cls", True, max_seq_length=12)
    normalized = ContrastiveEncoder.from_backbone(str(st_dir), projection_dim=8).eval()
    normalized.save_pretrained(target)
    (target / "checkpoint-7").mkdir()
    (target / "notes.txt").write_text("mine")
    plain = tiny_text_encoder(tokenizer=tiny_tokenizer(tmp_path / "vocab")).eval()
    plain.save_pretrained(target)
    assert not (target / "2_Normalize").exists()  # the old module is gone with the Normalize
    assert (target / "checkpoint-7").is_dir() and (target / "notes.txt").read_text() == "mine"
    st = sentence_transformers.SentenceTransformer(str(target), device="cpu")
    _close(st.encode(SENTENCES, convert_to_tensor=True), plain(**_tokens(plain)).embeddings)
    assert HUB_SUBFOLDER in {p.name for p in target.iterdir()}


# ----------------------------------------------------------------------------------------------
# push_to_hub: the same folder, through huggingface_hub.upload_folder
# ----------------------------------------------------------------------------------------------


def test_push_to_hub_uploads_the_layout_and_keeps_a_hand_written_readme(tmp_path, trained_timm) -> None:
    from hub_server import HubServer, use_hub_server
    from huggingface_hub import HfApi, hf_hub_download

    encoder, _ = trained_timm
    images = RandomImages(n=2, seed=3).images
    with HubServer(tmp_path / "hub") as server, use_hub_server(server.url, cache_dir=tmp_path / "cache") as refused:
        api = HfApi()
        api.create_repo("user/kept")
        api.upload_file(path_or_fileobj=b"# Notes by hand\n", path_in_repo="README.md", repo_id="user/kept")
        encoder.push_to_hub("user/kept")
        files = set(api.list_repo_files("user/kept"))
        assert {
            "config.json",
            "model.safetensors",
            f"{HUB_SUBFOLDER}/config.json",
            f"{HUB_SUBFOLDER}/model.safetensors",
        } <= files
        assert Path(hf_hub_download("user/kept", "README.md")).read_text() == "# Notes by hand\n"
        native = timm.create_model("hf-hub:user/kept", pretrained=True).eval()
        _close(native(images), encoder(pixel_values=images).embeddings)
        loaded = ContrastiveEncoder.from_pretrained("user/kept").eval()
        _close(loaded(pixel_values=images).projections, encoder(pixel_values=images).projections)
        encoder.push_to_hub("user/kept", replace_model_card=True)
        assert Path(hf_hub_download("user/kept", "README.md")).read_text() != "# Notes by hand\n"
    assert refused == []
