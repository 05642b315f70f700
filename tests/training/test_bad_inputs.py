"""The bad inputs of issue 16: each gives the correct result or an error naming the argument/file, the value and
the fix.

Three groups: inputs that failed obscurely deep inside torch / safetensors / huggingface_hub, inputs
that were accepted silently (a loss of 0, NaN embeddings, a random head), and numerics of the losses
on raw embeddings of large norm. Errors are checked for their type and for the pieces of the message
a user needs (argument or file, offending value, fix); results against independent references.
"""

from __future__ import annotations

import io
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny import tiny_text_encoder, tiny_timm_encoder
from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder
from safetensors.torch import load_file, save_file

from hf_contrast.data import defer_image_decoding
from hf_contrast.data.decode import BadImageError
from hf_contrast.hub import ContrastiveModelCardData, generate_model_card
from hf_contrast.losses import (
    LOCALLoss,
    afcl_loss,
    alignment_loss,
    info_nce_loss,
    local_loss,
    ocl_loss,
    simo_loss,
    spectral_contrastive_loss,
    supcon_loss,
    vicreg_loss,
)
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training import OCLTrainer, SimCLRTrainer, SupConTrainer
from hf_contrast.views import ImageViewCollator, simclr_transform

MEAN_STD = {"mean": [0.5] * 3, "std": [0.25] * 3}


@pytest.fixture(scope="module")
def timm_encoder() -> ContrastiveEncoder:
    return tiny_timm_encoder().eval()


@pytest.fixture(scope="module")
def text_encoder() -> ContrastiveEncoder:
    return tiny_text_encoder().eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("saved")
    torch.manual_seed(0)
    tiny_timm_encoder().save_pretrained(folder)
    return folder


def copy_of(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(saved, target)
    return target


def assert_message(error: pytest.ExceptionInfo[BaseException], *pieces: str) -> None:
    message = str(error.value)
    missing = [piece for piece in pieces if piece not in message]
    assert not missing, f"{missing} not in: {message}"


# ---- inputs that failed obscurely ---------------------------------------------------------------


def _local_label_out_of_range() -> None:
    z = torch.randn(4, 8)
    local_loss(z, z + 0.1, None, torch.randn(4, 3), torch.tensor([0, 0, 5, 1]))


OBSCURE: list[tuple[str, Callable[[], object], type[Exception], tuple[str, ...]]] = [
    ("local_loss label >= K", _local_label_out_of_range, ValueError, ("`labels`", "holds 5", "0..2", "`num_classes`")),
    ("local_loss negative label",
     lambda: local_loss(torch.randn(2, 4), torch.randn(2, 4), None, torch.randn(2, 3), torch.tensor([0, -1])),
     ValueError, ("`labels`", "holds -1", "remap the labels")),
    ("LOCALLoss(embedding_dim='8')", lambda: LOCALLoss(embedding_dim="8", num_classes=3), ValueError,
     ("`embedding_dim`", "'8'", "integer in [1, 1048576]")),
    ("LOCALLoss(num_classes=2.0)", lambda: LOCALLoss(embedding_dim=8, num_classes=2.0), ValueError,
     ("`num_classes`", "2.0", "integer in [2, 1048576]")),
    ("simclr_transform(hflip_p='0.5')", lambda: simclr_transform(32, hflip_p="0.5", **MEAN_STD), ValueError,
     ("`hflip_p`", "'0.5'", "a number")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "call", "error", "pieces"), OBSCURE, ids=[case[0] for case in OBSCURE])
def test_obscure_argument_errors_name_argument_value_and_fix(name, call, error, pieces) -> None:
    with pytest.raises(error) as caught:
        call()
    assert_message(caught, *pieces)


IMAGE_CASES = [
    ("one channel", lambda: torch.randn(2, 1, 32, 32),
     ("`pixel_values`", "1 channel", "takes 3", "expand(-1, 3, -1, -1)", "in_chans")),
    ("uint8", lambda: torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),
     ("`pixel_values`", "torch.uint8", "eval_transform_from_data_config", "/ 255")),
    ("2x2 image", lambda: torch.randn(2, 3, 2, 2),
     ("`pixel_values`", "2×2", "32-pixel total stride", "at least 32×32")),
    ("NaN pixels", lambda: torch.full((2, 3, 32, 32), float("nan")),
     ("`pixel_values`", "NaN", "[0, 1] before colour transforms")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "pieces"), IMAGE_CASES, ids=[case[0] for case in IMAGE_CASES])
def test_bad_pixel_values_name_the_problem_and_the_fix(timm_encoder, name, make, pieces) -> None:
    with pytest.raises(ValueError) as caught:
        timm_encoder(pixel_values=make())
    assert_message(caught, *pieces)


def test_fp16_pixel_values_are_cast_to_the_encoder_dtype(timm_encoder) -> None:
    images = torch.randn(2, 3, 32, 32).half()
    got = timm_encoder(pixel_values=images)
    want = timm_encoder(pixel_values=images.float())  # the same (fp16-representable) values in float32
    torch.testing.assert_close(got.projections, want.projections, rtol=0, atol=0)
    assert got.projections.dtype == torch.float32


def test_nan_pixels_are_only_checked_outside_training() -> None:
    encoder = tiny_timm_encoder().train()  # training: the trainer's nonfinite_policy owns non-finite losses
    out = encoder(pixel_values=torch.full((2, 3, 32, 32), float("nan")))
    assert torch.isnan(out.projections).all()


@pytest.mark.parametrize("modality", ["image", "text"])
def test_batch_of_one_in_training_mode_names_batchnorm_and_eval(modality: str) -> None:
    if modality == "image":
        encoder, inputs, name = (
            tiny_timm_encoder().train(),
            {"pixel_values": torch.randn(1, 3, 32, 32)},
            "`pixel_values`",
        )
    else:
        encoder, inputs, name = tiny_text_encoder().train(), {"input_ids": torch.tensor([[2, 7, 3]])}, "`input_ids`"
    with pytest.raises(ValueError) as caught:
        encoder(**inputs)
    assert_message(caught, name, "1 sample in training mode", "BatchNorm", "enc.eval()")
    encoder.eval()(**inputs)  # the documented fix works


def test_batch_of_one_without_batchnorm_trains() -> None:
    encoder = vit_encoder(img_size=16).train()  # LayerNorm only
    assert encoder(pixel_values=torch.randn(1, 3, 16, 16)).projections.shape == (1, 8)


TEXT_CASES = [
    ("float input_ids", {"input_ids": torch.ones(2, 4)}, ("`input_ids`", "torch.float32", ".long()")),
    ("out-of-vocabulary input_ids", {"input_ids": torch.full((2, 4), 10000)},
     ("`input_ids`", "holds 10000", "0..124", "enc.tokenizer", "resize_token_embeddings")),
    ("all-zero attention mask",
     {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0]])},
     ("`attention_mask`", "row(s) [0]", "tokenizer's `attention_mask`")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "inputs", "pieces"), TEXT_CASES, ids=[case[0] for case in TEXT_CASES])
def test_bad_token_inputs_name_the_problem_and_the_fix(text_encoder, name, inputs, pieces) -> None:
    with pytest.raises(ValueError) as caught:
        text_encoder(**inputs)
    assert_message(caught, *pieces)


@pytest.mark.parametrize("damage", ["corrupted", "truncated", "empty"])
def test_unreadable_safetensors_name_the_file_and_the_fix(saved, tmp_path, damage: str) -> None:
    folder = copy_of(saved, tmp_path)
    weights = folder / "hf_contrast" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(
        {"corrupted": b"\xff" * 8 + data[8:], "truncated": data[: len(data) // 2], "empty": b""}[damage]
    )
    with pytest.raises(OSError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(weights), "corrupted, truncated or empty", "Save or copy the model again")


def test_missing_encoder_config_names_the_file_and_the_fix(saved, tmp_path) -> None:
    folder = copy_of(saved, tmp_path)
    (folder / "hf_contrast" / "config.json").unlink()
    with pytest.raises(OSError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(folder / "hf_contrast" / "config.json"), "is missing", "from_backbone('local-dir:")


@pytest.mark.parametrize("path", ["/no/such/folder", "./no_such_model_dir/", "a/b/c"])
def test_missing_folder_is_named_not_taken_for_a_repo_id(tmp_path, monkeypatch, path: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as caught:
        ContrastiveEncoder.from_pretrained(path)
    assert_message(caught, repr(path), "not a folder", "save_pretrained")


def test_a_weights_file_instead_of_the_folder_names_the_fix(saved) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        ContrastiveEncoder.from_pretrained(saved / "hf_contrast" / "model.safetensors")
    assert_message(caught, "is a file", "pass the folder")


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("stored", ["path", "bytes"])
def test_truncated_png_names_the_row_and_the_file(tmp_path, stored: str) -> None:
    import datasets

    rng = np.random.default_rng(0)
    files = [_png(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(3)]
    files[2] = files[2][:300]  # truncated
    if stored == "path":
        paths = [tmp_path / f"{i}.png" for i in range(3)]
        for path, data in zip(paths, files):
            path.write_bytes(data)
        column = [str(p) for p in paths]
    else:
        column = [{"bytes": data, "path": None} for data in files]
    dataset = datasets.Dataset.from_dict({"image": column}).cast_column("image", datasets.Image())
    dataset = defer_image_decoding(dataset)  # decoded by the collator, which knows the row
    collator = ImageViewCollator(transform=simclr_transform(32, **MEAN_STD))
    with pytest.raises(BadImageError) as caught:
        collator([dataset[i] for i in range(3)])
    where = str(tmp_path / "2.png") if stored == "path" else "embedded bytes, 300 bytes"
    assert_message(caught, "row 2 of the batch", where, "truncated", "on_bad_image='skip'")


def test_card_data_takes_one_dataset_id_and_one_tag(timm_encoder) -> None:
    data = ContrastiveModelCardData(train_datasets="my-org/imgs", tags="vision")
    assert [entry["id"] for entry in data.train_datasets] == ["my-org/imgs"] and data.tags == ["vision"]
    data.eval_datasets = "my-org/test"  # also on assignment
    assert [entry["id"] for entry in data.eval_datasets] == ["my-org/test"]
    encoder = tiny_timm_encoder()
    encoder.model_card_data = data
    metadata = generate_model_card(encoder).split("---")[1]
    assert re.search(r"^- my-org/imgs$", metadata, re.M) and re.search(r"^- vision$", metadata, re.M)
    assert not re.search(r"^- v$", metadata, re.M)
    with pytest.raises(ValueError) as caught:
        ContrastiveModelCardData(train_datasets=5)
    assert_message(caught, "`train_datasets`", "5", "{'id': 'my-org/imgs'")


# ---- inputs that were accepted silently ---------------------------------------------------------


def test_info_nce_of_one_sample_is_an_error() -> None:
    with pytest.raises(ValueError) as caught:
        info_nce_loss(torch.randn(1, 8), torch.randn(1, 8))
    assert_message(caught, "`z1`", "(1, 8)", "loss is 0", "batch size >= 2")


@pytest.mark.parametrize("loss", [supcon_loss, ocl_loss])
def test_one_class_batch_warns_and_is_the_positives_only_loss(loss) -> None:
    z = torch.nn.functional.normalize(torch.randn(4, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    with pytest.warns(RuntimeWarning, match="one class, so there are no negatives"):
        got = loss(z, torch.zeros(4, dtype=torch.long), temperature=0.5)
    logits = z @ z.T / 0.5  # reference: every other sample is a positive; no negative, so OCL = SupCon
    log_prob = logits - torch.logsumexp(
        logits.masked_fill(torch.eye(4, dtype=torch.bool), -math.inf), dim=1, keepdim=True
    )
    want = -(log_prob.masked_fill(torch.eye(4, dtype=torch.bool), 0).sum(dim=1) / 3).mean()
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("trainer_cls", [SupConTrainer, OCLTrainer])
def test_supervised_trainer_rejects_a_one_class_dataset(tmp_path, trainer_cls) -> None:
    with pytest.raises(ValueError) as caught:
        trainer_cls(model=vit_encoder(), args=training_args(tmp_path), train_dataset=image_dataset(n=8, n_classes=1))
    assert_message(caught, "`train_dataset`", "single class (0)", "`label_column`='label'", "2 or more classes")


def test_ocl_rejects_fewer_projection_dimensions_than_classes(tmp_path) -> None:
    encoder = vit_encoder(projection_dim=2)
    with pytest.raises(ValueError) as caught:
        OCLTrainer(model=encoder, args=training_args(tmp_path), train_dataset=image_dataset(n=16, n_classes=8))
    assert_message(caught, "8 classes", "`projection_dim` is 2", "`projection_dim` >= 8", "objective='supcon'")
    SupConTrainer(model=encoder, args=training_args(tmp_path), train_dataset=image_dataset(n=16, n_classes=8))  # fine


def test_batch_size_one_is_rejected_before_training(tmp_path) -> None:
    args = training_args(tmp_path, per_device_train_batch_size=1)
    with pytest.raises(ValueError) as caught:
        SimCLRTrainer(model=vit_encoder(), args=args, train_dataset=image_dataset(n=8))
    assert_message(caught, "`per_device_train_batch_size`=1", "SimCLRObjective", "loss is 0", "Use 2 or more")


def test_nan_weights_are_not_loaded(saved, tmp_path) -> None:
    folder = copy_of(saved, tmp_path)
    weights = folder / "hf_contrast" / "model.safetensors"
    state = load_file(weights)
    state["projection_head.layers.0.weight"] = torch.full_like(state["projection_head.layers.0.weight"], float("nan"))
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(weights), "NaN or infinite", "projection_head.layers.0.weight", "earlier checkpoint")


def test_weights_without_the_projection_head_are_not_loaded(saved, tmp_path) -> None:
    folder = copy_of(saved, tmp_path)
    weights = folder / "hf_contrast" / "model.safetensors"
    state = {k: v for k, v in load_file(weights).items() if not k.startswith("projection_head.")}
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(weights), "projection_head.layers.0.weight", "random values", "from_backbone")


def test_a_new_task_head_may_be_missing_and_loading_info_is_returned(saved) -> None:
    model, info = ContrastiveEncoder.from_pretrained(saved, num_labels=3, output_loading_info=True)
    assert model.classifier is not None and set(info["missing_keys"]) == {"classifier.weight", "classifier.bias"}


# ---- numerics of raw-embedding losses -------------------------------------------------------------


def _value_and_grad(
    loss: Callable[[torch.Tensor], torch.Tensor], e: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    e = e.detach().clone().requires_grad_(True)
    value = loss(e)
    value.backward()
    return value.detach(), e.grad


RAW_LOSSES = [
    ("simo y=0", lambda e: simo_loss(e, 0.0)),
    ("simo y=0.3", lambda e: simo_loss(e, 0.3)),
    ("simo y=1", lambda e: simo_loss(e, 1.0)),
    ("afcl", lambda e: afcl_loss(e, n_classes=4)),
    ("spectral", lambda e: spectral_contrastive_loss(e[:4], e[4:])),
    ("vicreg", lambda e: vicreg_loss(e[:4], e[4:])),
]


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e9])
@pytest.mark.parametrize(("name", "loss"), RAW_LOSSES, ids=[case[0] for case in RAW_LOSSES])
def test_raw_losses_match_float64_at_large_and_small_norms(name, loss, scale: float) -> None:
    e = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)) * scale  # D = 4: representable at 1e9
    value, grad = _value_and_grad(loss, e)
    value64, grad64 = _value_and_grad(loss, e.double())
    assert torch.isfinite(value) and value.dtype == torch.float32
    torch.testing.assert_close(value.double(), value64, rtol=2e-5, atol=0)
    torch.testing.assert_close(grad.double(), grad64, rtol=2e-4, atol=2e-5 * grad64.abs().max().item())


@pytest.mark.parametrize(("name", "loss"), RAW_LOSSES[:4], ids=[case[0] for case in RAW_LOSSES[:4]])
def test_simo_and_afcl_are_finite_and_correct_at_norm_1e10(name, loss) -> None:
    e = torch.nn.functional.normalize(torch.randn(8, 16, generator=torch.Generator().manual_seed(2)), dim=1) * 1e10
    torch.testing.assert_close(loss(e).double(), loss(e.double()), rtol=2e-5, atol=0)


@pytest.mark.parametrize(("name", "loss"), RAW_LOSSES[4:], ids=[case[0] for case in RAW_LOSSES[4:]])
def test_a_loss_beyond_float32_is_an_error_naming_the_fix(name, loss) -> None:
    e = torch.randn(8, 64, generator=torch.Generator().manual_seed(3)) * 1e10
    assert math.isinf(loss(e.double()).item()) is False and abs(loss(e.double()).item()) > 3.5e38  # truly too large
    with pytest.raises(ValueError) as caught:
        loss(e)
    assert_message(caught, "`z1`, `z2`", "beyond the range of torch.float32", "float64 inputs (`.double()`)")


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_alignment_gradient_is_zero_on_identical_pairs_and_analytic_elsewhere(alpha: float) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    y = x.detach().clone()
    y[2:] += torch.randn(2, 5, generator=g, dtype=torch.float64)  # rows 0, 1 identical
    alignment_loss(x, y, alpha=alpha, normalize=False).backward()
    d = x.detach() - y
    norm = d.norm(dim=1, keepdim=True)
    want = torch.where(norm > 0, alpha * norm.clamp(min=1e-300) ** (alpha - 2) * d, torch.zeros_like(d)) / 4
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(x.grad[:2], torch.zeros(2, 5, dtype=torch.float64))


def test_a_ragged_batch_of_one_sample_is_skipped_and_counted_not_scored_as_zero(tmp_path) -> None:
    trainer = SimCLRTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=image_dataset(n=9))
    with pytest.warns(RuntimeWarning, match="skipped a batch of 1 sample"):
        trainer.train()  # 2 steps: a batch of 8, then the epoch's last row alone
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry.get("skipped_batches", 0) for entry in logged] == [0, 1]
    one = trainer.get_eval_dataloader(image_dataset(n=1))
    batch = trainer._prepare_inputs(next(iter(one)))
    with pytest.warns(RuntimeWarning, match="skipped a batch of 1 sample"):
        assert trainer.objective.eval_loss(trainer.model.eval(), batch, trainer.views) is None
